#!/usr/bin/env bash
# Run 38b (2026-12-05): every cuda suite, the cuda fuzz and compute-sanitizer on the defaults of
# this commit (d = 128's deferred rescale, the default since 0d1a151, has not had the full
# `scripts/device-run tests sanitize`; the rule's L term and the states judge changed since),
# the Python suite on the GPU (last run in 36d), and the goal's table beside the peers
# (bench/interleaved.py; it counts for the goal only on an H200).
# Here: scripts/device-build (every suite); there: bash bench/results/2026-12-05-run38b/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
goal_table 230
python_suite $((SECONDS + 150))
OUT=$OUT/run timeout $((590 - SECONDS)) bash scripts/device-run tests sanitize >$OUT/device-run.log 2>&1
echo "device-run rc=$? ${SECONDS}s"
tail -80 $OUT/run/summary.txt 2>/dev/null
date -u
