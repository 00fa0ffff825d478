#!/usr/bin/env bash
# Run 32d: the goal's table with exact float32's forward on sm90_3xtf32 (run 32c's kernel), and
# the suites that touch float32 on this build: the awkward shapes on the default, on ffma and on
# sm80_3xtf32, the properties, determinism, the ring on the device (and through the CLI in
# float32), the device-run sanitizer filter (its float32 cases now on sm90_3xtf32), fuzzing.
# (The large problems and TF32 suites are left out: with them the binaries and the tree pass the
# call's 64 MiB; run 32a ran the large problems on this family, and the TF32 kernels' PTX is
# unchanged.) Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_family_test cuda_backend_contract_test cuda_determinism_test cuda_ring_device_test"
# scripts/device-build; there: bash
# bench/results/2026-12-04-h200-run32d/call.sh, carrying .device.
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
step awkward-f32-3xtf32 60 env FLASHREF_CUDA_FAMILY=3xtf32 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
step awkward-fused 60 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step ring-device 120 $b/cuda_ring_device_test --gtest_brief=1
step verify-ring-f32 60 $fr verify --ranks 3 --backends cuda --dtype f32 --shape 1,4,1500,1500,128 --mask causal
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right:Cuda/AwkwardShapes.*/d128_f32_causal:Cuda/AwkwardShapes.*/partial_tiles_129_f32_causal_bottom_right'
for tool in memcheck racecheck initcheck synccheck; do
  step $tool 150 compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
done
step fuzz 15 $fr fuzz --backend cuda --seconds 10 --max-seq 2100 --seed $(date +%s)
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
lim=$((580 - SECONDS)); ((lim > 240)) && lim=240
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
date -u
