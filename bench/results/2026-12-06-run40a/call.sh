#!/usr/bin/env bash
# Run 40a (written 2026-12-06 for the next session's first call; the session's device time ran
# out): where cuDNN's d = 64 forward at S = 1k gains its 9% (run 39c, H100: 363k cycles against
# our 397k, the same tiles, grid and registers, more instructions issued but 4.65 cycles a warp
# instruction against our 5.31; our consumers' longest wait the K tile's mbarrier, 9% of their
# main loop's samples; our DRAM traffic 342 MB against cuDNN's 263, the least possible being 270).
#   1. cuDNN's kernel under Nsight Compute's source counters (bench/peer_kernels.py): its SASS,
#      with stall samples per instruction, beside ours (run 39c's source-1.csv.xz).
#   2. DRAM read and write bytes of our forward, the default order and sections of half the
#      budget (FLASHREF_CUDA_TUNE order90=3: K and V read again, evicted by the Q and O streaming
#      through L2? or O's half-sector stores?), and of cuDNN's.
#   3. fwd90=30 (FwdTraitsL2Hints: K and V loaded evict_last, Q evict_first, O stored streaming):
#      the awkward shapes, the same bits as the default (scripts/cuda-bits), and its DRAM bytes.
#   4. The default, order90=3 and fwd90=30 timed, alternately, two rounds (d = 64 S = 1k, 2k;
#      d = 128 S = 1k; the d = 64 leaderboard, default and 30); the backward at d = 128 S = 1k
#      with the two budgets.
#   5. On an H200, the goal's table beside the peers.
# Here: scripts/device-build; there: bash bench/results/2026-12-06-run40a/call.sh, carrying
# .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
# A call brings back at most 8 files: Nsight Compute's go into one archive, $OUT/ncu.tgz.
N=$(mktemp -d)
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum
# 2, 3. DRAM bytes; fwd90=30 checked.
step awkward-30 60 env FLASHREF_CUDA_TUNE=fwd90=30 $b/cuda_awkward_shapes_test --gtest_brief=1
step bits-30 120 scripts/cuda-bits $fr "$(tuned fwd90=30 $fr)" /tmp/bits-work
for o in order90=0 order90=3 fwd90=30; do
  FLASHREF_CUDA_TUNE=$o timeout 40 ncu --clock-control none --kernel-name regex:fwd_wgmma \
    --launch-skip 1 --launch-count 1 --metrics $metrics \
    $fr bench --backends cuda --shape 32,16,1024,1024,64 --dtype bf16 --mask causal --reps 1 --warmup 1 \
    >$N/ncu-$o.txt 2>&1
  echo "$o"; grep -E "dram__|lts__|gpu__time" $N/ncu-$o.txt
done
timeout 60 ncu --clock-control none --profile-from-start off --kernel-name regex:fprop --launch-count 1 \
  --metrics $metrics python3 bench/peer_kernels.py --peer cudnn --shape 32,16,1024,64 >$N/ncu-cudnn.txt 2>&1
echo "cudnn"; grep -E "dram__|lts__|gpu__time" $N/ncu-cudnn.txt
# 4. The times.
fwdt() {  # SHAPE TUNE
  echo "bench fwd $2 $1 $(FLASHREF_CUDA_TUNE=$2 timeout 30 "$fr" bench --backends cuda --dtype bf16 \
    --reps 30 --warmup 5 --json --shape "$1" --mask causal 2>&1 | tr -d '\n' | python3 -c \
    "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
for round in 0 1; do
  tunes=(fwd90=0 order90=3 fwd90=30); ((round)) && tunes=(fwd90=30 order90=3 fwd90=0)
  for shape in 32,16,1024,1024,64 32,16,1024,1024,128 16,16,2048,2048,64; do
    for tu in "${tunes[@]}"; do fwdt $shape $tu; done
  done
  if ((round)); then fwdt 1,16,16384,16384,64 fwd90=30; fwdt 1,16,16384,16384,64 fwd90=0
  else fwdt 1,16,16384,16384,64 fwd90=0; fwdt 1,16,16384,16384,64 fwd90=30; fi
done | tee $OUT/times.txt
# The sections' budget in the backward too (d = 128, S = 1k: key_tile_bytes counts Q, dO and the
# dQ accumulator rows against the same three quarters of L2).
for round in 0 1; do
  tunes=(order90=0 order90=3); ((round)) && tunes=(order90=3 order90=0)
  for tu in "${tunes[@]}"; do
    echo "bench bwd $tu 32,16,1024,1024,128 $(FLASHREF_CUDA_TUNE=$tu timeout 40 "$fr" bench --backends cuda \
      --dtype bf16 --reps 20 --warmup 3 --json --shape 32,16,1024,1024,128 --mask causal --backward 2>&1 |
      tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
  done
done | tee -a $OUT/times.txt
echo "timing done ${SECONDS}s"
# 5. The goal's table.
# (its files in a folder of their own, packed: a call brings back at most 8 files)
if [[ $gpu == *H200* ]]; then
  G=$(mktemp -d)
  OUT=$G goal_table $((SECONDS + 150))
  cp $G/interleaved.json $G/interleaved.log $OUT/ 2>/dev/null
  tar -C $G -czf $OUT/goal-logs.tgz .
fi
if ((SECONDS < 470)); then
# 1. cuDNN's forward kernel, instruction by instruction (the first fprop kernel after warm-up),
# last, in what is left of the call: the session's first three tries got no machine, so the
# goal's table goes before it.
timeout $((590 - SECONDS)) ncu --clock-control none --profile-from-start off --kernel-name regex:fprop --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
  -o $N/cudnn-fwd -f python3 bench/peer_kernels.py --peer cudnn --shape 32,16,1024,64 \
  >$N/ncu-cudnn-source.log 2>&1
echo "ncu cudnn source rc=$? ${SECONDS}s"
ncu --import $N/cudnn-fwd.ncu-rep --page source --csv --print-source sass >$N/cudnn-source.csv 2>&1 &&
  xz -9f $N/cudnn-source.csv
ncu --import $N/cudnn-fwd.ncu-rep --page details >$N/cudnn-details.txt 2>&1
rm -f $N/cudnn-fwd.ncu-rep
fi
tar -C $N -czf $OUT/ncu.tgz .
ls $OUT
date -u
