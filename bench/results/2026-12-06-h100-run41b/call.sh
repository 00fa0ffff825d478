#!/usr/bin/env bash
# Run 41b (2026-12-06):
#   1. The awkward shapes on the forward's new budget rule (configs.hpp's fwd_one_partition:
#      d = 64 past S_k = 2048 on the whole L2's budget).
#   2. That rule timed: d = 64 S = 4k (B 8), the default (now the whole L2's) against order90=3
#      (half of it: one partition's, the default before), two rounds in turn.
#   3. What the ordered dQ's chain costs the backward: the deterministic (ordered) and the
#      atomic fused kernel, each on its default sections and on half their budget (order90=3),
#      at d = 64 S = 2k (B 16, where one partition's budget made the ordered kernel 12% slower)
#      and d = 128 S = 16k (B 2, the goal's cell at 1.010x cuDNN), and at d = 128 16k on one
#      section (order90=1); two rounds in turn. If the atomic kernel gains from the smaller
#      sections where the ordered one loses, the chain is the whole obstacle.
#   4. The goal's table beside the peers (bench/interleaved.py, 16 rounds), on whatever card.
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run41b/call.sh, carrying .device (timeout_s 480).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
bwd() {  # LABEL SHAPE TUNE [FLAGS]: backward medians of 20
  echo "bench bwd $1 $2 $(FLASHREF_CUDA_TUNE=${3:-} timeout 90 "$fr" bench --backends cuda \
    --dtype bf16 --reps 20 --warmup 3 --json --shape "$2" --mask causal --backward ${4:-} 2>&1 |
    tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], \
round(x['median_ms'],4)) for x in r if x['pass'] != 'forward'])")"
}
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 $b/cuda_properties_test --gtest_brief=1
for round in 0 1; do
  tunes=("" order90=3); ((round)) && tunes=(order90=3 "")
  for tu in "${tunes[@]}"; do fwd "${tu:-default}" 8,16,4096,4096,64 "$tu"; done
done | tee $OUT/times.txt
for round in 0 1; do
  for shape in 16,16,2048,2048,64 2,16,16384,16384,128; do
    tunes=("" order90=3); ((round)) && tunes=(order90=3 "")
    [[ $shape == 2,* ]] && tunes+=(order90=1)
    for tu in "${tunes[@]}"; do
      bwd "ordered-${tu:-default}" $shape "$tu"
      bwd "atomic-${tu:-default}" $shape "$tu" --nondeterministic
    done
  done
done | tee -a $OUT/times.txt
echo "times done ${SECONDS}s"
goal_table $((SECONDS + 200))
date -u
