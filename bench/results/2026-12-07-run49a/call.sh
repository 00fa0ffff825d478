#!/usr/bin/env bash
# Run 49a (branch cand-hd): bf16/f16 at every head dim up to 256 on the wgmma kernels by default
# (d <= 32 padded to 64; d in 129..256 on d = 256's wgmma forward, the mma.sync backward), timed
# against the mma.sync kernels (FLASHREF_CUDA_FAMILY=sm80) on the shapes run 48b left out and the
# two it timed, two rounds in turn; then every suite and sanitizer on the new default
# (`scripts/device-run tests sanitize`) and the mma.sync family's suites (tests-sm80), to the
# call's end (CALL_LIMIT, default 590 s). About 200 s of times, 300 of suites, 60 of tests-sm80.
# There: bash bench/results/2026-12-07-run49a/call.sh, carrying .device built at this commit.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
# An H200 (none lent since run 39a): the goal's table first (cand-hd leaves d = 64's and 128's
# kernels as main has them), and the suites in a call of their own.
h200=0
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
((h200)) && goal_table 200
family_rounds sm80 auto 32,16,1024,1024,32 1,16,16384,16384,32 8,16,2048,2048,256 \
  1,16,8192,8192,256 | tee "$OUT/times.txt"
step tests-sm80 150 env OUT="$OUT/sm80" bash scripts/device-run tests-sm80
cat "$OUT/sm80/summary.txt" >>"$T" 2>/dev/null
tar -C "$OUT" -czf "$OUT/sm80.tgz" sm80 && rm -rf "$OUT/sm80"  # (a call brings back 8 files)
((h200)) || suites "${CALL_LIMIT:-590}"
date -u
