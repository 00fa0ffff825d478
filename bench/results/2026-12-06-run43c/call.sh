#!/usr/bin/env bash
# Run 43c (2026-12-06): the goal's table beside the peers (bench/interleaved.py, 16 rounds) on
# the kept default (this commit's source; the Python package is built there), on whatever card,
# with what is left of the session's device time (287 s, a start included). Run 43a's table had
# the finisher as the default. There: bash bench/results/2026-12-06-run43c/call.sh, carrying
# .device (timeout_s 200; the Python build needs only its py-deps).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
goal_table 190
date -u
