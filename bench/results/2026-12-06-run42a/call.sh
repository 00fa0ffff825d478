#!/usr/bin/env bash
# Run 42a (written 2026-12-06 for the next session's first call; this session's device time ran
# out):
#   1. On an H200, the goal's table beside the peers (bench/interleaved.py, 16 rounds): none has
#      been lent since run 39a.
#   2. fwd90=32 (FwdTraitsExpTurns: the consumers' ping-pong turns around the softmax's
#      exponentials, as cuDNN's forward takes them, rather than around the products' issue):
#      the awkward shapes, the same bits as the default (scripts/cuda-bits), then timed against
#      the default, two rounds in turn (d = 64 S = 1k and 2k, the d = 64 leaderboard, d = 128
#      S = 1k).
#   3. Every cuda suite and the sanitizers on this build for what is left of 590 s.
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run42a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if [[ $gpu == *H200* ]]; then
  G=$(mktemp -d)
  OUT=$G goal_table $((SECONDS + 170))
  cp $G/interleaved.json $G/interleaved.log $OUT/ 2>/dev/null
fi
step awkward-32 60 env FLASHREF_CUDA_TUNE=fwd90=32 $b/cuda_awkward_shapes_test --gtest_brief=1
step bits-32 120 scripts/cuda-bits $fr "$(tuned fwd90=32 $fr)" /tmp/bits-work
for round in 0 1; do
  tunes=(fwd90=0 fwd90=32); ((round)) && tunes=(fwd90=32 fwd90=0)
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
done | tee $OUT/times.txt
suites 585
date -u
