#!/usr/bin/env bash
# Run 36c (2026-12-05): the narrow steps with the vote (fwd90=21; 22 on d = 64's 192-row tiles),
# timed against the default as in run 36a, then their suites and bits again (the code moved).
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test"
# scripts/device-build; there: bash bench/results/2026-12-05-h100-run36c/call.sh, carrying .device.
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
for round in 0 1 2; do
  for shape in 32,16,1024,1024,64 64,16,512,512,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128 16,16,2048,2048,128; do
    if ((round % 2)); then fwd narrow $shape fwd90=21; fwd default $shape; else fwd default $shape; fwd narrow $shape fwd90=21; fi
  done
done | tee $OUT/times.txt
echo "times done ${SECONDS}s"
step awkward-narrow 90 env FLASHREF_CUDA_TUNE=fwd90=21 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-narrow-long 90 env FLASHREF_CUDA_TUNE=fwd90=22 $b/cuda_awkward_shapes_test --gtest_brief=1
step verify-narrow-64-br 60 env FLASHREF_CUDA_TUNE=fwd90=21 $fr verify --backends cuda --dtype bf16 --shape 2,2,1000,1300,64 --mask causal-bottom-right
step racecheck-narrow-short-64 90 env FLASHREF_CUDA_TUNE=fwd90=21 compute-sanitizer --tool racecheck --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1000,1000,64 --mask causal
tuned() { local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f; }
step bits-narrow 120 scripts/cuda-bits $fr $(tuned fwd90=21 $fr) $(mktemp -d)
date -u
