#!/usr/bin/env bash
# Run 41a (written 2026-12-06 for the next session's first call; this session's device time ran
# out):
#   1. On an H200, the goal's table beside the peers (bench/interleaved.py, 16 rounds): the last
#      H200 table is run 37a's, from before d = 128's deferred rescale, the short tiles at 2k, the
#      bit mask and the sections on one L2 partition's budget.
#   2. Why the fused backward at d = 64, S = 2k (B 16) is 12% slower on one partition's budget
#      (run 40b): its dK/dV kernel under Nsight Compute's source counters and warp states, on the
#      default (the whole L2's budget there) and on half of it (order90=3), so that the ordered
#      dQ's semaphore waits (our reading) and the memory reads are counted, not guessed.
#   3. d = 64's forward at S = 4k (B 8), the two budgets (order90=2 the whole L2's), two rounds
#      (run 40b's +1% was one pair).
#   4. fwd90=31 (FwdTraitsProducerSuspends: the producer's waits for a free stage suspend it up
#      to 10 us a try, so that its retries, 6.3 M instructions at d = 64 S = 1k in run 39c's
#      counters, leave its scheduler's issue slots to the consumers): the awkward shapes, then
#      timed against the default, two rounds (d = 64 S = 1k and 2k, d = 128 S = 1k).
#   5. Every cuda suite and the sanitizers on this build for what is left of 590 s.
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run41a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
if [[ $gpu == *H200* ]]; then
  G=$(mktemp -d)
  OUT=$G goal_table $((SECONDS + 170))
  cp $G/interleaved.json $G/interleaved.log $OUT/ 2>/dev/null
fi
# 2. (Nsight Compute's files packed into one: a call brings back at most 8 files.)
N=$(mktemp -d)
for o in order90=0 order90=3; do
  FLASHREF_CUDA_TUNE=$o timeout 90 ncu --clock-control none --kernel-name regex:bwd_dkdv \
    --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --import-source no -o $N/bwd-$o -f \
    $fr bench --backends cuda --shape 16,16,2048,2048,64 --dtype bf16 --mask causal --backward \
    --reps 1 --warmup 1 >$N/ncu-bwd-$o.log 2>&1
  echo "ncu bwd $o rc=$? ${SECONDS}s"
  ncu --import $N/bwd-$o.ncu-rep --page source --csv --print-source sass >$N/bwd-$o-source.csv 2>&1 &&
    xz -9f $N/bwd-$o-source.csv
  ncu --import $N/bwd-$o.ncu-rep --page details >$N/bwd-$o-details.txt 2>&1
  grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|L2 Hit" $N/bwd-$o-details.txt
  rm -f $N/bwd-$o.ncu-rep
done
tar -C $N -czf $OUT/ncu.tgz .
# 3.
for round in 0 1; do
  tunes=(order90=0 order90=2); ((round)) && tunes=(order90=2 order90=0)
  for tu in "${tunes[@]}"; do fwd "$tu" 8,16,4096,4096,64 "$tu"; done
done | tee $OUT/times.txt
# 4.
step awkward-31 60 env FLASHREF_CUDA_TUNE=fwd90=31 $b/cuda_awkward_shapes_test --gtest_brief=1
for round in 0 1; do
  tunes=(fwd90=0 fwd90=31); ((round)) && tunes=(fwd90=31 fwd90=0)
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 32,16,1024,1024,128; do
    for tu in "${tunes[@]}"; do fwd "$tu" $shape "$tu"; done
  done
done | tee -a $OUT/times.txt
# 5.
# (its console into tests.log, its folder packed: at most 8 files come back)
OUT=$OUT/run timeout $((585 - SECONDS)) bash scripts/device-run tests sanitize >>$T 2>&1
echo "device-run rc=$? ${SECONDS}s"
cp $OUT/run/summary.txt $OUT/summary.txt 2>/dev/null
tar -C $OUT -czf $OUT/run.tgz run && rm -rf $OUT/run
tail -40 $OUT/summary.txt 2>/dev/null
date -u
