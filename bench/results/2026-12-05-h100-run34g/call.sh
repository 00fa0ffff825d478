#!/usr/bin/env bash
# Run 34g: run 34d's suites, then run 34e's times inside what was left of the call, on the build
# of commit 937523c (fused90=5's producer at 64 registers; .device with b806fb9's flashref as
# base-bin.tar.xz), in one call of 560 s: what was left of the session's device time after six
# starts that failed. It ran on an H100 (the first machine that came). Run 34d's steps took the
# whole call (awkward-convert and initcheck-convert hung to their timeouts), so run 34e never
# started. As run (carrying .device):
#   bash bench/results/2026-12-05-h200-run34d/call.sh > $OUT/34d.txt 2>&1; t=$SECONDS;
#   FLASHREF_CALL_BUDGET=$((430 - t)) bash bench/results/2026-12-05-h200-run34e/call.sh \
#     > $OUT/34e.txt 2>&1
set -u
cd "$(dirname "$0")/../../.."
bash bench/results/2026-12-05-h200-run34d/call.sh > $OUT/34d.txt 2>&1
t=$SECONDS
FLASHREF_CALL_BUDGET=$((430 - t)) bash bench/results/2026-12-05-h200-run34e/call.sh > $OUT/34e.txt 2>&1
