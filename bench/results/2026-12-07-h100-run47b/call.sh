#!/usr/bin/env bash
# Run 47b: run 47a's question on the candidate defaults, with every suite on them. Run 47a's
# call never found a machine (three tries), so this build makes the candidates the defaults:
# d = 128's forward pins each step's P~ V wait after its softmax (fwd90=33 runs it unpinned, the
# defaults before), and d = 64's causal short tiles past S_k = 1024 keys add two P~ arrays to the
# pin (fwd90=34 runs them without, as before; fwd90=35 runs the long-walk kernel on every
# problem the short tiles take). Checks first (scripts/cuda-bits: 35 against the default, the
# same bits by construction), then the forward timed against the other choice, two rounds in
# turn (medians of 30), then `scripts/device-run tests sanitize` to the end.
# There: bash bench/results/2026-12-06-run47b/call.sh, carrying .device built at this commit.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step bits-35 150 scripts/cuda-bits "$(tuned fwd90=35 $fr)" $fr /tmp/bits-work
for round in 0 1; do
  tunes=(fwd90=0 fwd90=33); ((round)) && tunes=(fwd90=33 fwd90=0)
  for shape in 32,16,1024,1024,128 2,16,16384,16384,128 1,16,16384,16384,128; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
  for tu in "${tunes[@]}"; do FWD_MASK=none fwd "$tu-nomask" 1,16,16384,16384,128 "$tu"; done
  tunes=(fwd90=0 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=0)
  for shape in 20,16,1536,1536,64 16,16,2048,2048,64; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
done | tee $OUT/times.txt
suites $((${CALL_LIMIT:-600} - 15))
date -u
