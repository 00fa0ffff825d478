#!/usr/bin/env bash
# Run 31c (after run 31b): the new defaults (the fused backward's ordered kernel stores dK and dV
# by the TMA on short walks; d = 64's short forward tiles overlap a tile's start with the last
# one's tail without a mask): their suites and sanitizers, then the goal's table through the
# Python package. Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test cuda_large_problems_test cuda_family_test cuda_backend_contract_test"
# scripts/device-build; there: bash .device/call31c.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
F="env FLASHREF_CUDA_TUNE=bwd90=1"          # the suites' small problems on the fused kernel
S="env FLASHREF_CUDA_TUNE=bwd90=1,fused90=4" # ... with the staged epilogue
G="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2"  # ... on two persistent blocks
step family 30 $b/cuda_family_test --gtest_brief=1
step contract 30 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused 60 $F $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused-staged 60 $S $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused-g2 60 $G $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 60 env FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-fused 60 $F RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-fused-staged 60 $S RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-128-br-gqa 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-128-f32grad 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1300,1100,128 --mask causal --grad-dtype f32
step verify-64-causal-2k 60 $fr verify --backends cuda --dtype f16 --shape 2,8,2048,2048,64 --mask causal --heads-kv 2
step verify-64-nomask-short 60 $fr verify --backends cuda --dtype bf16 --shape 3,8,700,900,64 --mask none --heads-kv 1
step verify-64-nomask-1k-f16 60 $fr verify --backends cuda --dtype f16 --shape 4,16,1024,1024,64 --mask none
step verify-96-nomask 60 $fr verify --backends cuda --dtype bf16 --shape 2,4,1100,1200,96 --mask none
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-g2-128 60 $G compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-64-nomask 60 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,64 --mask none
done
step fuzz 15 $fr fuzz --backend cuda --seconds 10 --max-seq 2100 --seed $(date +%s)
# The rule's edge, staged against by the TMA (fused90=4 against the default) at S = 2k.
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],4), round(x['min_ms'],4)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2; do
  sides=(def fused90=4); ((round == 2)) && sides=(fused90=4 def)
  for s in "${sides[@]}"; do one $s s2048,64 --shape 16,16,2048,2048,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s2048,128 --shape 16,16,2048,2048,128 --mask causal; done
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
lim=$((580 - SECONDS)); ((lim > 240)) && lim=240
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
(cd $OUT && find . -type f ! -name interleaved.json ! -name interleaved.log ! -name tests.log ! -name python-build.log -delete)
date -u
