#!/usr/bin/env bash
# Run 32h: the 3xTF32 forward's producer on all four of its warps, the raw tiles' next load issued
# by one of them once all have read them (run 32g: the clamp of K's and V's halves cost 8%, so
# the producer's transform sets the pace): the suites, `verify`, the sanitizers, fuzzing; the
# default and the clamp variants beside ffma; and the float32 rows of the goal's table.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test
# cuda_backend_contract_test cuda_determinism_test" scripts/device-build; there: bash
# bench/results/2026-12-04-h200-run32h/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step family 30 $b/cuda_family_test --gtest_brief=1
step contract 30 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-f32-ffma 60 env FLASHREF_CUDA_FAMILY=ffma $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
step awkward-fused 60 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-f32-v13 60 env FLASHREF_CUDA_TUNE=fwd90=13 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='Cuda/*_f32_*'
step awkward-f32-v14 60 env FLASHREF_CUDA_TUNE=fwd90=14 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='Cuda/*_f32_*'
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
V="$fr verify --backends cuda --dtype f32"
step verify-128-causal 60 $V --shape 2,8,1024,1024,128 --mask causal
step verify-128-br-gqa 60 $V --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step verify-72-nomask-mqa 60 $V --shape 2,4,700,900,72 --mask none --heads-kv 1
step verify-128-sharp 60 $V --shape 1,4,512,512,128 --mask causal --scale 1.0
step verify-128-negscale 60 $V --shape 1,4,700,600,128 --mask none --scale -0.09
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-f32-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
done
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
one() {
  local fam=$1 tune=$2 label=$3; shift 3; [[ $tune == - ]] && tune=""
  local r=$(FLASHREF_CUDA_FAMILY=$fam FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype f32 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$fam $tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2; do
  sides=("auto -" "auto fwd90=13" "auto fwd90=14" "ffma -"); ((round == 2)) && sides=("ffma -" "auto fwd90=14" "auto fwd90=13" "auto -")
  for s in "${sides[@]}"; do one $s d128-causal --shape 1,1,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s d128-b8 --shape 8,1,4096,4096,128 --mask none; done
  for s in "${sides[@]}"; do one $s d64-causal --shape 1,1,16384,16384,64 --mask causal; done
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 100 python3 interleaved.py --out $OUT/interleaved.json --configs f32,f32-d128,f32-b8-d128) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -4
date -u
