#!/usr/bin/env bash
# Run 41c (2026-12-06), the session's last device time:
#   1. Our d = 64 forward at S = 1k (B 32) under Nsight Compute's source counters, on today's
#      kernels (run 39c's profile predates one partition's budget, which took its DRAM reads
#      from 282 MB to cuDNN's 202): what is left of the 3.4% to cuDNN's kernel, whose source
#      counters run 40a took (bench/results/2026-12-06-h100-run40a/ncu.tgz).
#   2. The d = 128 backward at S = 8k (B 4; the goal's forward+backward at 0.952x there in run
#      41b): every kernel of one backward, ours and cuDNN's, its time, DRAM bytes and L2 hit
#      rate; and our dK/dV kernel's source counters.
#   3. On an H200, the goal's table beside the peers (bench/interleaved.py, 16 rounds).
# Here: scripts/device-build, then `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-06-run41c/call.sh, carrying .device (timeout_s 560).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
N=$(mktemp -d)
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum
src() {  # NAME KERNEL-REGEX SHAPE
  timeout 150 ncu --clock-control none --kernel-name "regex:$2" --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
    -o $N/$1 -f $fr bench --backends cuda --shape $3 --dtype bf16 --mask causal --backward \
    --reps 1 --warmup 1 >$N/ncu-$1.log 2>&1
  echo "ncu source $1 rc=$? ${SECONDS}s"
  ncu --import $N/$1.ncu-rep --page source --csv --print-source sass >$N/$1-source.csv 2>&1 &&
    xz -9f $N/$1-source.csv
  ncu --import $N/$1.ncu-rep --page details >$N/$1-details.txt 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Elapsed Cycles" $N/$1-details.txt
  rm -f $N/$1.ncu-rep
}
src fwd-d64-1k fwd_wgmma 32,16,1024,1024,64
# 2. (our backward's kernels: the preprocess, the fused dK/dV kernel and what follows it, in the
# warm-up's backward and the timed one)
timeout 120 ncu --clock-control none --kernel-name regex:'bwd_' --launch-skip 0 --launch-count 6 \
  --metrics $metrics $fr bench --backends cuda --shape 4,16,8192,8192,128 --dtype bf16 \
  --mask causal --backward --reps 1 --warmup 1 >$N/ncu-bwd-d128-8k.txt 2>&1
echo "ncu ours rc=$? ${SECONDS}s"
grep -E "^  [a-z_].*\(|dram__|lts__|gpu__time" $N/ncu-bwd-d128-8k.txt | cut -c1-150
timeout 120 ncu --clock-control none --profile-from-start off --metrics $metrics \
  python3 bench/peer_kernels.py --peer cudnn --shape 4,16,8192,128 >$N/ncu-cudnn-d128-8k.txt 2>&1
echo "ncu cudnn rc=$? ${SECONDS}s"
grep -E "^  [a-z_].*\(|dram__|lts__|gpu__time" $N/ncu-cudnn-d128-8k.txt | cut -c1-150
src bwd-d128-8k bwd_dkdv 4,16,8192,8192,128
tar -C $N -czf $OUT/ncu.tgz .
# 3.
if [[ $gpu == *H200* ]]; then
  goal_table $((SECONDS + 200))
fi
date -u
