#!/usr/bin/env bash
# On the GPU machine's CPU: the cpu backend (flashref_cpu_timing, built elsewhere and carried)
# beside PyTorch's CPU flash attention, float32, B=1, H=8, S=2048, d=64, causal, with 2 and 16
# threads, in one run (absolute times drift between runs: report the ratios). The peer runs
# before and after ours so that drift shows.
#   cpu/bench/device_cpu_bench.sh PATH/TO/flashref_cpu_timing [OUT_DIR] [REPS]
set -uo pipefail
timing=$1
out=${2:-.}
reps=${3:-11}
peer="python3 $(dirname "$0")/torch_cpu_peer.py"
{
  echo "== machine"; lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200; nproc
  for threads in 2 16; do
    echo "== threads $threads"
    export OMP_NUM_THREADS=$threads OMP_PROC_BIND=close OMP_PLACES=cores
    $peer "$threads" 2048 "$reps"
    for tile in 64,64 128,64 64,128 128,128; do
      echo "-- tile $tile"
      "$timing" --threads "$threads" --tile "$tile" --reps "$reps" --no-reference
    done
    $peer "$threads" 2048 "$reps"
    echo "-- default tiles, against the naive reference backend"
    "$timing" --threads "$threads" --reps 3
    echo "-- avx2 kernels"
    "$timing" --threads "$threads" --reps "$reps" --isa avx2 --no-reference
  done
} 2>&1 | tee "$out/cpu_bench.log"
