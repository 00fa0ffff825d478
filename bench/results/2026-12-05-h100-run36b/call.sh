#!/usr/bin/env bash
# Run 36b (written as run 36a on 2026-12-05 with the device time spent; its suites moved to run
# 36a): the goal's table on the build of runs 35b-35c (the defaults' SASS unchanged since):
# - the goal's table (bench/interleaved.py through the Python package built there). Runs 35a-35c
#   had H100s only; the goal is judged on the H200 (run 34b's table), so the card is printed.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test" scripts/device-build, `git rev-parse --short HEAD > .device/commit`,
# and b806fb9's flashref as .device/base-bin.tar.xz (run 34d's header: a worktree of b806fb9
# built with FLASHREF_DEVICE_BUILD_DIR=/tmp/basebuild FLASHREF_DEVICE_VARIANTS=0
# FLASHREF_DEVICE_TESTS=cuda_family_test); there: bash bench/results/2026-12-05-h100-run36b/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
echo "suites done ${SECONDS}s"
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
lim=$((585 - SECONDS)); ((lim > 240)) && lim=240
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
date -u
