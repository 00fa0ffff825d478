#!/usr/bin/env bash
# Run 43a (2026-12-06): dQ finished by its last adder (BwdTraitsDqFinish, the ordered fused
# kernels' new default; perf-notes "Run 43a").
#   1. The awkward shapes and the properties on it; the same bits as fused90=5 (the same kernels
#      without the finisher, dQ by the postprocess alone: scripts/cuda-bits).
#   2. Timed against fused90=5, causal backward, two rounds in turn: d = 128 at S = 1k, 2k, 8k
#      and the leaderboard, d = 64 at S = 1k and the leaderboard.
#   3. Every cuda suite and the sanitizers on this build, until 470 s.
#   4. The goal's table beside the peers (bench/interleaved.py, 16 rounds), on whatever card,
#      with what is left of 590 s (it takes about 110 s with the Python build).
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run43a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
bwd() {  # LABEL SHAPE TUNE: causal backward, medians of 20
  echo "bench bwd $1 $2 $(FLASHREF_CUDA_TUNE=${3:-} timeout 90 "$fr" bench --backends cuda \
    --dtype bf16 --reps 20 --warmup 3 --json --shape "$2" --mask causal --backward 2>&1 |
    tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], \
round(x['median_ms'],4)) for x in r if x['pass'] != 'forward'])")"
}
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 $b/cuda_properties_test --gtest_brief=1
step bits-finish 150 scripts/cuda-bits "$(tuned fused90=5 $fr)" $fr /tmp/bits-work
for round in 0 1; do
  tunes=("" fused90=5); ((round)) && tunes=(fused90=5 "")
  for shape in 32,16,1024,1024,128 16,16,2048,2048,128 4,16,8192,8192,128 1,16,16384,16384,128 \
    32,16,1024,1024,64 1,16,16384,16384,64; do
    for tu in "${tunes[@]}"; do bwd "${tu:-finisher}" $shape "$tu"; done
  done
done | tee $OUT/times.txt
echo "times done ${SECONDS}s"
suites 470
goal_table 590
date -u
