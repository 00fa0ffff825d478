#!/usr/bin/env bash
# Run 46a: the softmax under its own P~ V (docs/perf-notes.md, "Run 46a").
#   1. On an H200 only, the goal's table on the defaults first (none lent since run 39a).
#   2. fwd90=33 (FwdTraitsPinPvWait: each step's wait for its P~ V after its softmax) and 34 (33
#      with two P~ arrays): the awkward shapes, the same bits as the default (scripts/cuda-bits).
#   3. Both timed against the default, two rounds in turn (medians of 30): d = 64 S = 1k, 2k and
#      the leaderboard (34 not there: its 192-row kernel is serialized, C7511), d = 128 S = 1k,
#      8k and the leaderboard.
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run46a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if [[ $gpu == *H200* ]]; then
  goal_table 170
fi
for v in 33 34; do
  step awkward-$v 90 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1
  step bits-$v 150 scripts/cuda-bits $fr "$(tuned fwd90=$v $fr)" /tmp/bits-work-$v
done
for round in 0 1; do
  tunes=(fwd90=0 fwd90=33 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=33 fwd90=0)
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128 \
    4,16,8192,8192,128 1,16,16384,16384,128; do
    for tu in "${tunes[@]}"; do
      [[ $tu == fwd90=34 && $shape == 1,16,16384,16384,64 ]] && continue
      fwd "$tu" $shape "$tu"
    done
  done
done | tee $OUT/times.txt
date -u
