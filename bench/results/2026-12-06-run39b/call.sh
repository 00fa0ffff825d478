#!/usr/bin/env bash
# Run 39b (2026-12-06): the goal's table beside the peers (bench/interleaved.py; it counts for the
# goal only on an H200) and the Python suite on the GPU, on the build that run 39a judged with
# every cuda suite and the sanitizers (d879575: d = 64's short tiles up to S = 2k causal, d = 128's
# deferred rescale).
# Here: scripts/device-build; there: bash bench/results/2026-12-06-run39b/call.sh, carrying
# .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
goal_table 240
python_suite $((SECONDS + 160))
date -u
