#!/usr/bin/env bash
# Run 46b: run 46a's question on the build that takes the pin as its default (commit 3e48f2e;
# run 46a's call found no machine three times): fwd90=33 now runs the unpinned kernels (the
# defaults before), 34 the pinned ones with two P~ arrays (docs/perf-notes.md, "Run 46a").
#   1. The awkward shapes on 33 and 34, and scripts/cuda-bits: the default against 33.
#   2. The forward timed, two rounds in turn (medians of 30): default, 33, 34 at d = 64 S = 1k,
#      2k and the leaderboard (34 not there: its 192-row kernel is serialized, C7511), d = 128
#      S = 1k, 8k and the leaderboard.
#   3. Every cuda suite and the sanitizers on these defaults until 440 s (seven starts found no
#      machine this session, and what device time is left holds no goal's table beside them).
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run46b/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step awkward-33 90 env FLASHREF_CUDA_TUNE=fwd90=33 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-34 90 env FLASHREF_CUDA_TUNE=fwd90=34 $b/cuda_awkward_shapes_test --gtest_brief=1
step bits-33 150 scripts/cuda-bits "$(tuned fwd90=33 $fr)" $fr /tmp/bits-work
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
suites 440
date -u
