#!/usr/bin/env bash
# Run 46c: run 46b's checks and times alone (runs 46a and 46b's calls found no machine; their
# scripts are in git history, commits 1372f3b-2ae7797), on run 46b's binaries (commit 3e48f2e,
# whose default held each step's P~ V wait after its softmax and whose fwd90=33 ran the kernels
# without it; main reverted that default after eight starts found no machine, so on main 33 is
# the pin). The awkward shapes on 3e48f2e's fwd90=33 (unpinned) and 34 (pinned, two P~ arrays),
# scripts/cuda-bits of its default against 33, then the forward timed, two rounds in turn
# (medians of 30). What is left of the session's device time holds no suite.
# There: bash bench/results/2026-12-06-run46c/call.sh, carrying .device built at 3e48f2e.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step awkward-33 90 env FLASHREF_CUDA_TUNE=fwd90=33 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-34 90 env FLASHREF_CUDA_TUNE=fwd90=34 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-pinned 90 $b/cuda_awkward_shapes_test --gtest_brief=1
step bits-33 150 scripts/cuda-bits "$(tuned fwd90=33 $fr)" $fr /tmp/bits-work
for round in 0 1; do
  tunes=(fwd90=33 fwd90=0 fwd90=34); ((round)) && tunes=(fwd90=34 fwd90=0 fwd90=33)
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128 \
    1,16,16384,16384,128; do
    for tu in "${tunes[@]}"; do
      [[ $tu == fwd90=34 && $shape == 1,16,16384,16384,64 ]] && continue
      fwd "$tu" $shape "$tu"
    done
  done
done | tee $OUT/times.txt
date -u
