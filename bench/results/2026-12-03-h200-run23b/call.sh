#!/usr/bin/env bash
# Run 23b: run 23a again with Nsight Compute's units parsed, on families whose per-head working
# set stays within L2 (backward S_q <= 16k; forward S_k <= 16k): run 23a's bench family at
# d = 64 ran S_q = 123k, where each key tile's steps stream Q and dO from memory. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
fr=$w/bin/flashref
run() {  # run NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout $limit python3 bench/bwd_block_cost.py --flashref $fr "$@" --out $OUT/$name.json > $OUT/$name.txt 2>&1
  echo "== $name rc=$? $((SECONDS-t0))s"; grep -v '^1,' $OUT/$name.txt | tail -8
}
run ncu-backward-d128 120 --pass backward --d 128 --area $((1<<27)) --lengths 8448,16896,33792,67584,135168 --ncu ncu --rounds 1
run ncu-backward-d64 100 --pass backward --d 64 --area $((1<<27)) --lengths 8448,16896,33792,67584,135168 --ncu ncu --rounds 1
run ncu-forward-d128 100 --pass forward --d 128 --area $((1<<28)) --lengths 16896,33792,67584,135168 --ncu ncu --rounds 1
run ncu-forward-d64 100 --pass forward --d 64 --area $((1<<28)) --lengths 16896,33792,67584,135168 --ncu ncu --rounds 1
run bench-backward-d128 110 --pass backward --d 128 --area $((1<<27)) --lengths 8448,16896,33792,67584,135168 --rounds 2 --reps 5
run bench-backward-d64 80 --pass backward --d 64 --area $((1<<27)) --lengths 8448,16896,33792,67584,135168 --rounds 2 --reps 5
date -u
