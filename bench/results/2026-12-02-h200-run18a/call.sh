#!/usr/bin/env bash
# Run 18a: profile the short-sequence backward (ours and cuDNN's), time the open candidates.
set -u
cd "$(dirname "$0")/.."
root=$PWD
date -u
export FLASHREF_PROFILE_SHAPES="32,16,1024,1024,64 --dtype bf16;32,16,1024,1024,128 --dtype bf16;32,16,1024,1024,64 --dtype bf16 --nondeterministic;32,16,1024,1024,128 --dtype bf16 --nondeterministic"
export FLASHREF_PROFILE_PEERS="cudnn 32,16,1024,64;cudnn 32,16,1024,128;cudnn 1,16,16384,64"
mkdir -p $OUT/prof $OUT/time
OUT=$OUT/prof timeout 330 scripts/device-run profile
pkill -f ncu; sleep 1
# Timing: unpack the binaries ourselves.
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
fr=$w/bin/flashref
(nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/time/clocks.csv 2>&1 &)
j=$OUT/time/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2
  local t0=$(date +%s.%N)
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"t0\": $t0, \"t1\": $(date +%s.%N), \"rows\": $r}" >> $j
}
for round in 1 2; do
  for t in "" order90=6 writer90=1; do
    one "$t" "lb64-bwd" --shape 1,16,16384,16384,64 --mask causal --backward
    one "$t" "lb128-bwd" --shape 1,16,16384,16384,128 --mask causal --backward
  done
  for t in "" bwd90=1; do
    one "$t" "s1k-d64" --shape 32,16,1024,1024,64 --mask causal --backward
    one "$t" "s1k-d128" --shape 32,16,1024,1024,128 --mask causal --backward
  done
  one "" "s1k-d64-nd" --shape 32,16,1024,1024,64 --mask causal --backward --nondeterministic
  one "" "s1k-d128-nd" --shape 32,16,1024,1024,128 --mask causal --backward --nondeterministic
done
pkill nvidia-smi
date -u
