#!/usr/bin/env bash
# Run 40c (2026-12-06, the session's last 273 s of device time): the build that takes run 40b's
# choice (the forward on one L2 partition's budget everywhere; the fused backward on it up to
# S_q = 1024 at d = 64 and 4096 at d = 128, on the whole L2's past that). The awkward shapes,
# then the goal's table beside the peers (bench/interleaved.py; it counts for the goal only on
# an H200), 8 rounds instead of 16 (the call has about 120 s).
# Here: scripts/device-build; there: bash bench/results/2026-12-06-run40c/call.sh, carrying
# .device (timeout_s 120).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step awkward 30 $b/cuda_awkward_shapes_test --gtest_brief=1
python_build
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' \
  1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
(cd bench && PYTHONPATH=$PWD/../build-python-device/site timeout $((115 - SECONDS)) python3 \
  interleaved.py --rounds 8 --out $OUT/interleaved.json --configs $configs) >$OUT/interleaved.log 2>&1
echo "interleaved rc=$? ${SECONDS}s"
grep "^|" $OUT/interleaved.log | tail -22
date -u
