#!/usr/bin/env bash
# Run 39d (2026-12-06): run 39c's profile had d = 64's S = 1k forward reading 342 MB from DRAM
# where cuDNN's reads 263 (the minimum: Q, K, V once, O written, is 270), and its consumers'
# longest wait the K tile's mbarrier. Is it K and V read again (the section's heads' K and V
# evicted by the Q and O streaming through L2), or O's half-sector stores? DRAM read and write
# bytes under Nsight Compute for the default order and for sections of half the budget
# (FLASHREF_CUDA_TUNE order90=3), then the two timed, alternately, two rounds.
# Here: scripts/device-build; there: bash bench/results/2026-12-06-run39d/call.sh, carrying
# .device (timeout_s 140).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
for o in 0 3; do
  FLASHREF_CUDA_TUNE=order90=$o timeout 25 ncu --clock-control none --kernel-name regex:fwd_wgmma \
    --launch-skip 1 --launch-count 1 --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
    $fr bench --backends cuda --shape 32,16,1024,1024,64 --dtype bf16 --mask causal --reps 1 --warmup 1 \
    >$OUT/ncu-order$o.txt 2>&1
  echo "order90=$o"; grep -E "dram__|lts__|gpu__time" $OUT/ncu-order$o.txt
done
fwdo() {  # SHAPE ORDER
  echo "bench fwd order90=$2 $1 $(FLASHREF_CUDA_TUNE=order90=$2 timeout 30 "$fr" bench --backends cuda --dtype bf16 \
    --reps 30 --warmup 5 --json --shape "$1" --mask causal 2>&1 | tr -d '\n' | python3 -c \
    "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
for round in 0 1; do
  for shape in 32,16,1024,1024,64 32,16,1024,1024,128 16,16,2048,2048,64; do
    if ((round)); then fwdo $shape 3; fwdo $shape 0; else fwdo $shape 0; fwdo $shape 3; fi
  done
done | tee $OUT/times.txt
date -u
