#!/usr/bin/env bash
# Run 19b: on the default build (no tuning variants) of the commit in .device/commit: every
# cuda test and 60 s of fuzzing (device-run tests), the SASS check, then Nsight Compute's
# instruction counts for the d = 64 forward at S = 1k, ours beside cuDNN's, then
# compute-sanitizer (device-run sanitize) in what is left of 585 s.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
mkdir -p $OUT/tests $OUT/san $OUT/prof
OUT=$OUT/tests timeout 330 scripts/device-run tests sass 2>&1 | grep -v '^bench' | tail -40
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
P=$OUT/prof/profile.txt; : > $P
secs=(--section SpeedOfLight --section InstructionStats --section WarpStateStats --section SchedulerStats
  --section ComputeWorkloadAnalysis --section SourceCounters --metrics sass__inst_executed_per_opcode
  --print-metric-instances values)
t0=$SECONDS
echo "### ours" >> $P
timeout 120 ncu --clock-control none --kernel-name regex:fwd_ --launch-count 1 "${secs[@]}" \
  $w/bin/flashref bench --backends cuda --shape 32,16,1024,1024,64 --mask causal --dtype bf16 \
  --reps 1 --warmup 0 >> $P 2>&1
echo "profile ours rc=$? $((SECONDS - t0))s"
t0=$SECONDS
echo "### cudnn" >> $P
timeout 150 ncu --clock-control none --profile-from-start off --kernel-name regex:fprop "${secs[@]}" \
  python3 bench/peer_kernels.py --peer cudnn --shape 32,16,1024,64 >> $P 2>&1
echo "profile cudnn rc=$? $((SECONDS - t0))s"
left=$((585 - SECONDS))
echo "sanitize with ${left}s left"
((left > 30)) && OUT=$OUT/san timeout $left scripts/device-run sanitize 2>&1 | tail -40
tail -50 $OUT/san/summary.txt 2>/dev/null | grep -v '^bench' | tail -5
ls -R $OUT | head -30; date -u
