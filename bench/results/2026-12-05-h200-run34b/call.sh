#!/usr/bin/env bash
# Run 34b: exact float32's backward on 3xTF32 wgmma as the default (run 34a passed it under
# FLASHREF_CUDA_TUNE=f32bwd=6, the same kernels): the suites on the default with ffma's backward
# (f32bwd=9) as the control, `verify` under the exact rule, the four sanitizers, fuzzing over
# every dtype and in float32, the Python suite on the GPU, then the goal's table.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test
# cuda_determinism_test" scripts/device-build; there: bash
# bench/results/2026-12-05-h200-run34b/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step family 30 $b/cuda_family_test --gtest_brief=1
step awkward 90 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-f32-ffma-bwd 90 env FLASHREF_CUDA_TUNE=f32bwd=9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*f32*:*Float32*'
step awkward-fused 90 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 90 env RC_PARAMS=max_success=100 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
V="$fr verify --backends cuda --dtype f32"
step verify-128-causal 60 $V --shape 2,8,1024,1024,128 --mask causal
step verify-128-br-gqa 60 $V --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step verify-72-nomask-mqa 60 $V --shape 2,4,700,900,72 --mask none --heads-kv 1
step verify-64-causal 60 $V --shape 2,8,2048,2048,64 --mask causal
step verify-33-br 60 $V --shape 1,3,257,190,33 --mask causal-bottom-right
step verify-100-sharp 60 $V --shape 1,4,512,512,100 --mask causal --scale 1.0
step verify-bf16-128 60 $fr verify --backends cuda --dtype bf16 --shape 1,8,2000,2000,128 --mask causal
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
  step $tool-64 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,300,500,64 --mask none
done
step fuzz 15 $fr fuzz --backend cuda --seconds 10 --max-seq 2100 --seed $(date +%s)
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 240 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
lim=$((560 - SECONDS)); ((lim > 200)) && lim=200
t0=$SECONDS
(PYTHONPATH=$site timeout $lim python3 -m pytest -q -rs -p no:cacheprovider python/tests) > $OUT/pytest.log 2>&1
echo "pytest rc=$? $((SECONDS-t0))s $(tail -1 $OUT/pytest.log)"
date -u
