#!/usr/bin/env bash
# Run 47d: what the session's last device time allows of run 47b's question (eight starts found
# no machine): the candidate defaults of ea970ae checked (the awkward shapes on the defaults and
# on fwd90=35, scripts/cuda-bits of 35 against the default) and timed against the other choice,
# two rounds in turn (medians of 30: d = 128 causal S = 16k B 2 and the leaderboard, its shape
# without the mask; d = 64 S = 2k B 16 and 1.5k B 20). No suite: the candidates do not land from
# this call. The checks first, the times next, cuda-bits last (what the call's limit cuts).
# There: bash bench/results/2026-12-06-run47d/call.sh, carrying .device built at ea970ae.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step awkward-default 90 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-35 90 env FLASHREF_CUDA_TUNE=fwd90=35 $b/cuda_awkward_shapes_test --gtest_brief=1
for round in 0 1; do
  tunes=(fwd90=0 fwd90=33); ((round)) && tunes=(fwd90=33 fwd90=0)
  for shape in 2,16,16384,16384,128 1,16,16384,16384,128; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
  for tu in "${tunes[@]}"; do FWD_MASK=none fwd "$tu-nomask" 1,16,16384,16384,128 "$tu"; done
  tunes=(fwd90=0 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=0)
  for shape in 16,16,2048,2048,64 20,16,1536,1536,64; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
done | tee $OUT/times.txt
step bits-35 150 scripts/cuda-bits "$(tuned fwd90=35 $fr)" $fr /tmp/bits-work
date -u
