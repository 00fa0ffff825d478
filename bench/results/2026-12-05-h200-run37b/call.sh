#!/usr/bin/env bash
# Run 37b (2026-12-05): the softmax variants of commit cea88a7 (fwd90=8 tree max; 9, 10, 11 an
# eighth, a quarter, half of the exponentials on the FMA pipe; 5 no ping-pong) timed against
# the default, two rounds alternating, then their awkward shapes, `verify` on the 192-row tiles
# and d = 128, and the tree's bits against the default (perf-notes, "Run 37").
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test" scripts/device-build; there: bash
# bench/results/2026-12-05-h200-run37b/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
fwd() {  # label shape tune
  echo "bench fwd $1 $2 $(FLASHREF_CUDA_TUNE=${3:-} timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --shape $2 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
for round in 0 1; do
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128; do
    vs=(0 8 9 10 5); ((round)) && vs=(5 10 9 8 0)
    for v in "${vs[@]}"; do fwd v$v $shape fwd90=$v; done
    [[ $shape == 32,16,1024,1024,64 ]] && fwd v11 $shape fwd90=11
  done
done | tee $OUT/times.txt
echo "times done ${SECONDS}s"
for v in 8 10 11 5; do step awkward-$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1; done
step verify-10-long-64 60 env FLASHREF_CUDA_TUNE=fwd90=10 $fr verify --backends cuda --dtype bf16 --shape 2,4,2100,1500,64 --mask causal-bottom-right
step verify-10-d128 60 env FLASHREF_CUDA_TUNE=fwd90=10 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1000,128 --mask causal --heads-kv 2
step verify-11-short-64 60 env FLASHREF_CUDA_TUNE=fwd90=11 $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
tuned() { local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f; }
((SECONDS < 480)) && step bits-tree 110 scripts/cuda-bits $fr $(tuned fwd90=8 $fr) $(mktemp -d)
date -u
