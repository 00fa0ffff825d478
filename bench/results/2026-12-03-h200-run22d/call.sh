#!/usr/bin/env bash
# Run 22d: the d = 128 leaderboard backward profiled, ours (the fused ordered kernel) beside
# cuDNN's (Nsight Compute, clocks left alone): utilization, the tensor pipe's share, where the
# warps wait, memory traffic. Only the backward kernels (ours: regex bwd_dkdv; cuDNN: its
# backward's kernels after the forward). Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
fr=$w/bin/flashref
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy)
t0=$SECONDS
timeout 110 ncu --clock-control none --kernel-name regex:'bwd_dkdv' --launch-count 1 "${sections[@]}" \
  $fr bench --backends cuda --shape 1,16,16384,16384,128 --mask causal --dtype bf16 --backward --reps 1 --warmup 0 \
  > $OUT/ncu-ours.txt 2>&1
echo "ncu ours rc=$? $((SECONDS-t0))s"
t0=$SECONDS
timeout 120 ncu --clock-control none --profile-from-start off "${sections[@]}" \
  python3 bench/peer_kernels.py --peer cudnn --shape 1,16,16384,128 > $OUT/ncu-cudnn.txt 2>&1
echo "ncu cudnn rc=$? $((SECONDS-t0))s"
grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc Active|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Shared Memory Configuration Size|Grid Size|Block Size|DRAM Throughput|L2 Hit|SM Frequency|Tensor|Achieved Occupancy" $OUT/ncu-ours.txt $OUT/ncu-cudnn.txt | cut -c1-170 | head -120
date -u
