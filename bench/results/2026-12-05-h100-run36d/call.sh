#!/usr/bin/env bash
# Run 36d (2026-12-05): d = 64's short causal tiles with narrow steps as the default
# (configs.hpp, FwdShortConfig): the default suites on it, the goal's table beside the peers, and
# the Python suite while time is left (the device budget's last ~400 s).
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test" scripts/device-build; there: bash bench/results/2026-12-05-h100-run36d/
# call.sh, carrying .device (timeout_s 420).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-poisoned 60 env FLASHREF_CUDA_TUNE=poison90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step properties 90 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step memcheck-short-64 60 compute-sanitizer --tool memcheck --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,3,1000,1000,64 --mask causal --heads-kv 1
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 120 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt; grep "^|" $OUT/interleaved.log | tail -22
lim=$((390 - SECONDS))
if ((lim > 30)); then
  t0=$SECONDS
  (PYTHONPATH=$site timeout $lim python3 -m pytest -q -rs -p no:cacheprovider python/tests > $OUT/pytest.log 2>&1)
  echo "pytest rc=$? $((SECONDS-t0))s $(tail -1 $OUT/pytest.log)" | tee -a $OUT/steps.txt
fi
date -u
