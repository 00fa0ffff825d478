#!/usr/bin/env bash
# Run 40c (2026-12-06, the session's last 273 s of device time): the build that takes run 40b's
# choice (the forward on one L2 partition's budget everywhere; the fused backward on it up to
# S_q = 1024 at d = 64 and 4096 at d = 128, on the whole L2's past that). The awkward shapes,
# then the goal's table beside the peers (bench/interleaved.py; it counts for the goal only on
# an H200) in what is left of 140 s.
# Here: scripts/device-build; there: bash bench/results/2026-12-06-run40c/call.sh, carrying
# .device (timeout_s 150).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step awkward 30 $b/cuda_awkward_shapes_test --gtest_brief=1
goal_table 140
date -u
