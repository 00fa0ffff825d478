#!/usr/bin/env bash
# Run 23a: a step's cost against a block's (backward) or a tile's (forward) beyond its steps,
# bench/bwd_block_cost.py on families of problems without a mask that keep the steps and move
# the units: the main kernel alone under Nsight Compute in SM cycles, and the whole backward in
# `flashref bench` (with the preprocess's term). Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
fr=$w/bin/flashref
for pass in backward forward; do
  for d in 128 64; do
    t0=$SECONDS
    timeout 150 python3 bench/bwd_block_cost.py --flashref $fr --pass $pass --d $d --ncu ncu --rounds 1 \
      --out $OUT/ncu-$pass-d$d.json > $OUT/ncu-$pass-d$d.txt 2>&1
    echo "ncu $pass d=$d rc=$? $((SECONDS-t0))s"; cat $OUT/ncu-$pass-d$d.txt | tail -8
  done
done
for d in 128 64; do
  t0=$SECONDS
  timeout 100 python3 bench/bwd_block_cost.py --flashref $fr --pass backward --d $d --rounds 2 --reps 5 \
    --out $OUT/bench-backward-d$d.json > $OUT/bench-backward-d$d.txt 2>&1
  echo "bench backward d=$d rc=$? $((SECONDS-t0))s"; tail -8 $OUT/bench-backward-d$d.txt
done
date -u
