#!/usr/bin/env bash
# Run 28b (after run 28a): the default build with the ordered fused backward on two writers.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test cuda_large_problems_test cuda_backend_contract_test" scripts/device-build,
# then cp dev/sm90/call28b.sh .device/; on the device: bash .device/call28b.sh, carrying .device.
# What it runs: the suites and sanitizers on the new default (also on two blocks, grid90=2);
# two rounds of the atomic kernel with two writers (fused90=2) against the three-stage one, and
# of the no-mask d = 64 backward persistent (fused90=2) and on a block per key tile with two
# writers (fused90=3) against a block per key tile with one (the default); then the
# goal's table through the Python layer. Self-limited to about 500 s.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
ND=FLASHREF_TEST_NONDETERMINISTIC=1
G2="env FLASHREF_CUDA_TUNE=grid90=2"
step contract 60 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-g2 60 $G2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic-x2 60 env FLASHREF_CUDA_TUNE=fused90=2,grid90=2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-gqa-128 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-f32grad-64 60 $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,64 --mask causal --grad-dtype f32
for tool in racecheck synccheck memcheck; do
  step $tool-128 60 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-g2-64 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
done
F3="env FLASHREF_CUDA_TUNE=fused90=3"
step awkward-f3 60 $F3 $b/cuda_awkward_shapes_test --gtest_brief=1
step verify-f3-nomask-64 60 $F3 $fr verify --backends cuda --dtype f16 --shape 2,8,1500,2100,64 --mask none --heads-kv 2 --grad-dtype f32
step racecheck-f3-nomask-64 60 $F3 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,64 --heads-kv 2 --mask none
step fuzz 20 $fr fuzz --backend cuda --seconds 10 --max-seq 1500 --seed $(date +%s)
j=$OUT/time/times.jsonl; : > $j
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2; do
  sides=(def fused90=2); ((round == 2)) && sides=(fused90=2 def)
  for s in "${sides[@]}"; do one $s s1024,128-atomic --shape 32,16,1024,1024,128 --mask causal --nondeterministic; done
  for s in "${sides[@]}"; do one $s lb,128-atomic --shape 1,16,16384,16384,128 --mask causal --nondeterministic; done
  n=(def fused90=2 fused90=3); ((round == 2)) && n=(fused90=3 fused90=2 def)
  for s in "${n[@]}"; do one $s lb,64-nomask --shape 1,16,16384,16384,64 --mask none; done
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 230 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; tail -20 $OUT/interleaved.log
date -u
