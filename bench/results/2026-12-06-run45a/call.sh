#!/usr/bin/env bash
# Run 45a: every suite and the sanitizers on the landed kernels (cuda/ as at d4d7ada, the two
# in-kernel dQ finishers deleted after runs 43a and 44a), and the goal's table beside the peers:
# first if the card is an H200 (none lent since run 39a), else after the suites.
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run45a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if [[ $gpu == *H200* ]]; then
  goal_table 200
  suites 585
else
  suites 420
  goal_table 590
fi
date -u
