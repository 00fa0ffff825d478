#!/usr/bin/env bash
# Run 49d (main, .device built at cb18dff: the kernels of runs 49a-49c): the goal's table twice
# in one call, to measure the spread of the cells at the goal's lines (d = 128's forward+backward
# at 4k, its backward at 16k) on one machine. There: bash bench/results/2026-12-07-run49d/call.sh,
# carrying .device.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
goal_table 200 -1
goal_table 330 -2
date -u
