#!/usr/bin/env bash
# Run 44a (written 2026-12-06 for the next session's first call): fused90=6, dQ written inside the
# ordered fused kernel by its consumers a key tile late (bwd_dkdv.cuh's BwdTraitsDqFinishLate;
# perf-notes "Run 44a"), built after run 43a and not yet run on a GPU.
#   1. Correctness first: the awkward shapes on it, poisoned (poison90=1) and on two blocks
#      (grid90=2: many key tiles a block, so every tile but the last converts late); the same
#      bits as the default (scripts/cuda-bits); memcheck, racecheck, synccheck and initcheck on
#      device-run's filter of the awkward shapes, on two blocks; memcheck on `verify` at
#      d = 128 and 64 (the persistent grid's many tiles).
#   2. Timed against the default, causal backward, two rounds in turn: d = 128 at S = 1k, 2k,
#      8k and the leaderboard, d = 64 at S = 1k and the leaderboard.
#   3. The goal's table beside the peers (bench/interleaved.py) with what is left of 590 s.
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-07-run44a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
step awkward-late 60 env FLASHREF_CUDA_TUNE=fused90=6,poison90=1 $b/cuda_awkward_shapes_test \
  --gtest_brief=1
step awkward-late-two-blocks 120 env FLASHREF_CUDA_TUNE=fused90=6,grid90=2,poison90=1 \
  $b/cuda_awkward_shapes_test --gtest_brief=1
step bits-late 120 scripts/cuda-bits $fr "$(tuned fused90=6 $fr)" /tmp/bits-work
for tool in memcheck racecheck synccheck initcheck; do
  step $tool-late 150 env FLASHREF_CUDA_TUNE=fused90=6,grid90=2 compute-sanitizer --tool $tool \
    --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
done
for dh in 128 64; do
  step memcheck-late-verify-d$dh 150 env FLASHREF_CUDA_TUNE=fused90=6 compute-sanitizer \
    --tool memcheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 \
    --shape 2,40,512,512,$dh --mask causal
done
bwd_rounds fused90=6 32,16,1024,1024,128 16,16,2048,2048,128 4,16,8192,8192,128 \
  1,16,16384,16384,128 32,16,1024,1024,64 1,16,16384,16384,64 | tee $OUT/times.txt
echo "times done ${SECONDS}s"
goal_table 590
date -u
