#!/usr/bin/env bash
# Run 47c: run 47b's call cut to what the session's device time has left after seven starts
# found no machine: the forward against the other choice on the problems the decision turns on,
# two rounds in turn (medians of 30: d = 128 causal S = 16k B 2 and the leaderboard, its shape
# without the mask; d = 64 S = 2k B 16), then `scripts/device-run tests sanitize` to the end.
# scripts/cuda-bits is left out (the suites judge the kernels under the rule).
# There: CALL_LIMIT=N bash bench/results/2026-12-06-run47c/call.sh, carrying .device built at
# ea970ae (the candidate defaults).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
for round in 0 1; do
  tunes=(fwd90=0 fwd90=33); ((round)) && tunes=(fwd90=33 fwd90=0)
  for shape in 2,16,16384,16384,128 1,16,16384,16384,128; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
  for tu in "${tunes[@]}"; do FWD_MASK=none fwd "$tu-nomask" 1,16,16384,16384,128 "$tu"; done
  tunes=(fwd90=0 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=0)
  for tu in "${tunes[@]}"; do fwd "$tu" 16,16,2048,2048,64 "$tu"; done
done | tee $OUT/times.txt
suites $((${CALL_LIMIT:-600} - 10))
date -u
