#!/usr/bin/env bash
# Run 41f (2026-12-06), the session's last ~120 s of device time: fwd90=32 (FwdTraitsExpTurns)
# checked on the awkward shapes, then timed against the default at d = 64 S = 1k and 2k, two
# rounds in turn, as far as the time goes. Run 42a (bench/results/2026-12-06-run42a) is the
# full call: the bits, the leaderboard, d = 128, the suites and sanitizers.
# There: bash bench/results/2026-12-06-run41f/call.sh, carrying .device (timeout_s 100).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step awkward-32 40 env FLASHREF_CUDA_TUNE=fwd90=32 $b/cuda_awkward_shapes_test --gtest_brief=1
for round in 0 1; do
  tunes=(fwd90=0 fwd90=32); ((round)) && tunes=(fwd90=32 fwd90=0)
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
done | tee $OUT/times.txt
date -u
