#!/usr/bin/env bash
# Run 38c (2026-12-05): the forward variants of c2b05e1 checked, then timed against the
# default, two rounds alternating; then, on an H200, the goal's table beside the peers and the
# Python suite. fwd90=27: d = 128's O stored by a warp of the producer's warpgroup
# (FwdTraitsStoreWarp); 29: that with narrow steps (the consumers' main loop back on the
# uniform datapath: 16 R2UR, 0 BSSY); 28: d = 64's short tiles up to S_q = 2048.
# Here: scripts/device-build (every suite); there: bash bench/results/2026-12-05-run38c/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
for v in 27 29 28; do step awkward-$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1; done
san() { local v=$1 tool=$2 name=$3; shift 3; step "$tool-$v-$name" 60 env FLASHREF_CUDA_TUNE=fwd90=$v compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 "$@"; }
for v in 27 29; do
  for tool in racecheck synccheck memcheck initcheck; do san $v $tool causal --shape 2,40,512,512,128 --mask causal; done
  san $v memcheck large-gqa --shape 2,8,1000,1000,128 --mask causal-bottom-right --heads-kv 2 --large
done
san 27 racecheck nomask --shape 2,8,700,900,128 --mask none
step verify-29-f16-large 60 env FLASHREF_CUDA_TUNE=fwd90=29 $fr verify --backends cuda --dtype f16 --shape 2,8,1000,1000,128 --mask causal --heads-kv 4 --large
step verify-28-2k 60 env FLASHREF_CUDA_TUNE=fwd90=28 $fr verify --backends cuda --dtype bf16 --shape 1,4,2000,2048,64 --mask causal-bottom-right
for round in 0 1; do
  for shape in 32,16,1024,1024,128 16,16,2048,2048,128 8,16,4096,4096,128 1,16,16384,16384,128; do
    vs=(0 27 29); ((round)) && vs=(29 27 0)
    for v in "${vs[@]}"; do fwd v$v $shape fwd90=$v; done
  done
  for shape in 16,16,2048,2048,64 32,16,2048,2048,64; do
    vs=(0 28); ((round)) && vs=(28 0)
    for v in "${vs[@]}"; do fwd v$v $shape fwd90=$v; done
  done
done | tee $OUT/times.txt
echo "timing done ${SECONDS}s"
((SECONDS < 300)) && step bits-29 100 scripts/cuda-bits $fr $(tuned fwd90=29 $fr) $(mktemp -d)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
[[ $gpu == *H200* ]] && ((SECONDS < 420)) && goal_table 585
date -u
