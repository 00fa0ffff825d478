#!/usr/bin/env bash
# Run 47a: the pinned P~ V wait (fwd90=33) and the pin with two P~ arrays (34) timed on the
# goal's d = 128 grid, causal and without the mask, and 34 on d = 64's short tiles past S = 1k,
# against the default, two rounds in turn (medians of 30). First the checks: the awkward shapes
# on 33 and 34, and scripts/cuda-bits of 34 against the default (the same bits by construction).
# On an H200 the goal's table comes first (goal_table).
# There: bash bench/results/2026-12-06-run47a/call.sh, carrying .device built at this commit.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
# On an H200 (none lent since run 39a), the goal's table first, on the landed defaults.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then goal_table 170; fi
step awkward-33 90 env FLASHREF_CUDA_TUNE=fwd90=33 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-34 90 env FLASHREF_CUDA_TUNE=fwd90=34 $b/cuda_awkward_shapes_test --gtest_brief=1
step bits-34 150 scripts/cuda-bits "$(tuned fwd90=34 $fr)" $fr /tmp/bits-work
for round in 0 1; do
  tunes=(fwd90=0 fwd90=33 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=33 fwd90=0)
  for shape in 32,16,1024,1024,128 8,16,4096,4096,128 2,16,16384,16384,128 \
    1,16,32768,32768,128 1,16,16384,16384,128; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
  for tu in "${tunes[@]}"; do FWD_MASK=none fwd "$tu-nomask" 1,16,16384,16384,128 "$tu"; done
  tunes=(fwd90=0 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=0)
  for shape in 32,16,1024,1024,64 20,16,1536,1536,64 16,16,2048,2048,64; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
done | tee $OUT/times.txt
date -u
