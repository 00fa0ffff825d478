#!/usr/bin/env bash
# Run 32e: the 3xTF32 halves clamped to TF32's largest finite value (and the test of float32
# values near the largest), and the dK/dV kernels that stage their epilogue taking zeroed tensor
# maps: the suites on every backward path (two passes, fused staged and by the TMA, two
# persistent blocks, atomic), the sanitizers on the fused kernels, fuzzing, and the 3xTF32
# forward's time against run 32c's. Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test
# cuda_properties_test cuda_family_test cuda_backend_contract_test cuda_determinism_test
# cuda_large_problems_test" scripts/device-build; there: bash
# bench/results/2026-12-04-h200-run32e/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
F="env FLASHREF_CUDA_TUNE=bwd90=1"
S="env FLASHREF_CUDA_TUNE=bwd90=1,fused90=4"
G="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2"
step family 30 $b/cuda_family_test --gtest_brief=1
step contract 30 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-f32-ffma 60 env FLASHREF_CUDA_FAMILY=ffma $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
step awkward-fused 60 $F $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused-staged 60 $S $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused-g2 60 $G $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 60 env FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-fused 60 $F RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-128-br-gqa 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-f32-128 60 $fr verify --backends cuda --dtype f32 --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-g2-128 60 $G compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-twopass-64 60 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,600,500,64 --mask none
  step $tool-f32-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype f32 --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
done
step fuzz 15 $fr fuzz --backend cuda --seconds 10 --max-seq 2100 --seed $(date +%s)
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
one() {
  local fam=$1 label=$2; shift 2
  local r=$(FLASHREF_CUDA_FAMILY=$fam timeout 60 $fr bench --backends cuda --dtype f32 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$fam] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2; do
  sides=(auto ffma); ((round == 2)) && sides=(ffma auto)
  for s in "${sides[@]}"; do one $s d128-causal --shape 1,1,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s d128-b8 --shape 8,1,4096,4096,128 --mask none; done
  for s in "${sides[@]}"; do one $s d64-causal --shape 1,1,16384,16384,64 --mask causal; done
done
date -u
