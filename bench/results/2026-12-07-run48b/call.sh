#!/usr/bin/env bash
# Run 48b: bf16/f16 at d = 32 (padded to 64) and d = 256 (the forward) on the wgmma kernels
# (FLASHREF_CUDA_FAMILY=sm90) against the mma.sync kernels (the default at both), checked first,
# then the goal's table. Steps: the backend contract (plan() on a GPU); the awkward shapes at
# d = 8, 32 and 256 under the override and compute-sanitizer's memcheck on five of them; forward
# and backward, causal bf16, each family in turn, two rounds in opposite orders (medians of 30 /
# 20); then bench/interleaved.py's goal table through the Python package built there, to the
# call's end (CALL_LIMIT, default 540 s). SHAPES (B,H,S_q,S_k,d ...) cuts the timed problems.
# There: bash bench/results/2026-12-07-run48b/call.sh, carrying .device built at this commit.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step backend-contract 90 "$b/cuda_backend_contract_test" --gtest_brief=1
any_d='*/d8_bf16_*:*/d8_f16_*:*/mqa_4_over_1_bf16_*:*/mqa_4_over_1_f16_*:*/d256_bf16_*:*/d256_f16_*'
step awkward-sm90-any-d 120 env FLASHREF_CUDA_FAMILY=sm90 "$b/cuda_awkward_shapes_test" \
  --gtest_brief=1 --gtest_filter="$any_d"
step memcheck-sm90-any-d 150 env FLASHREF_CUDA_FAMILY=sm90 compute-sanitizer --tool memcheck \
  --error-exitcode 9 "$b/cuda_awkward_shapes_test" --gtest_brief=1 \
  --gtest_filter='*/d8_bf16_causal:*/mqa_4_over_1_f16_causal_bottom_right:*/mqa_4_over_1_bf16_none:*/d256_bf16_causal_bottom_right:*/d256_f16_none'
for round in 0 1; do
  fams=(sm80 sm90); ((round)) && fams=(sm90 sm80)
  for shape in ${SHAPES:-1,16,16384,16384,32 32,16,1024,1024,32 1,16,8192,8192,256 8,16,2048,2048,256}; do
    for f in "${fams[@]}"; do
      export FLASHREF_CUDA_FAMILY=$f
      fwd "$f" $shape
      bwd "$f" $shape
    done
  done
done | tee "$OUT/times.txt"
unset FLASHREF_CUDA_FAMILY
# (The table needs about 175 s with the package's build: skipped when less is left.)
((${CALL_LIMIT:-540} - SECONDS > 175)) && goal_table "${CALL_LIMIT:-540}"
date -u
