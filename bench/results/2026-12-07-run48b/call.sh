#!/usr/bin/env bash
# Run 48b: d = 32 on the wgmma kernels (FLASHREF_CUDA_FAMILY=sm90, padded to 64) against the
# mma.sync kernels (the default at d <= 32), checked first, then the goal's table. Steps: the
# backend contract (plan() on a GPU); the awkward shapes and compute-sanitizer's memcheck on
# d = 8 and 32 under the override; forward and backward, causal bf16, each family in turn, two
# rounds in opposite orders (medians of 30 / 20); then bench/interleaved.py's goal table through
# the Python package built there, to the call's end.
# There: bash bench/results/2026-12-07-run48b/call.sh, carrying .device built at this commit.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step backend-contract 90 "$b/cuda_backend_contract_test" --gtest_brief=1
small='*/d8_bf16_*:*/d8_f16_*:*/mqa_4_over_1_bf16_*:*/mqa_4_over_1_f16_*'
step awkward-sm90-small-d 120 env FLASHREF_CUDA_FAMILY=sm90 "$b/cuda_awkward_shapes_test" \
  --gtest_brief=1 --gtest_filter="$small"
step memcheck-sm90-small-d 150 env FLASHREF_CUDA_FAMILY=sm90 compute-sanitizer --tool memcheck \
  --error-exitcode 9 "$b/cuda_awkward_shapes_test" --gtest_brief=1 \
  --gtest_filter='*/d8_bf16_causal:*/mqa_4_over_1_f16_causal_bottom_right:*/mqa_4_over_1_bf16_none'
for round in 0 1; do
  fams=(sm80 sm90); ((round)) && fams=(sm90 sm80)
  for shape in 1,16,16384,16384,32 32,16,1024,1024,32 4,16,4096,4096,32; do
    for f in "${fams[@]}"; do
      export FLASHREF_CUDA_FAMILY=$f
      fwd "$f" $shape
      bwd "$f" $shape
    done
  done
done | tee "$OUT/times-d32.txt"
unset FLASHREF_CUDA_FAMILY
goal_table "${CALL_LIMIT:-590}"
date -u
