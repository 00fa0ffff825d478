#!/usr/bin/env bash
# Run 36a (2026-12-05): narrow steps in the sm90 forward (fwd.cuh's FwdTraitsNarrowSteps; tuning
# variants fwd90=21, and 22 on d = 64's 192-row tiles at any S), timed against the default and
# checked; then what run 36b (the goal's table) left for the suites:
# - forward times, default against fwd90=21, alternating, three rounds (causal, the goal's shapes
#   where the diagonal's share is largest, and the leaderboards);
# - fwd90=21/22 on the awkward shapes, properties, verify at larger shapes, racecheck and
#   memcheck, and bits against the default (scripts/cuda-bits: the narrow steps leave out only
#   masked columns, so O and L, and every gradient after them, should be the same bits);
# - cuda_family_test (its first-store test has not run on a GPU);
# - the opt-in sm80_3xtf32 family's float32 suites with the clamped split (6fa46ac), and its bits
#   against b806fb9's (.device/base-bin.tar.xz) while time is left.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test"
# scripts/device-build, `git rev-parse --short HEAD > .device/commit`; there: bash
# bench/results/2026-12-05-h100-run36a/call.sh, carrying .device (timeout_s 600).
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
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128 16,16,2048,2048,128 1,16,16384,16384,128; do
    if ((round % 2)); then fwd narrow $shape fwd90=21; fwd default $shape; else fwd default $shape; fwd narrow $shape fwd90=21; fi
  done
done | tee $OUT/times.txt
echo "times done ${SECONDS}s"
step awkward-narrow 90 env FLASHREF_CUDA_TUNE=fwd90=21 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-narrow-long 90 env FLASHREF_CUDA_TUNE=fwd90=22 $b/cuda_awkward_shapes_test --gtest_brief=1
step verify-narrow-128 60 env FLASHREF_CUDA_TUNE=fwd90=21 $fr verify --backends cuda --dtype bf16 --shape 2,4,2000,2000,128 --mask causal --heads-kv 2
step verify-narrow-64-long 60 env FLASHREF_CUDA_TUNE=fwd90=21 $fr verify --backends cuda --dtype f16 --shape 1,4,3000,3000,64 --mask causal
step verify-narrow-64-br 60 env FLASHREF_CUDA_TUNE=fwd90=21 $fr verify --backends cuda --dtype bf16 --shape 2,2,1000,1300,64 --mask causal-bottom-right
step verify-narrow-long-br 60 env FLASHREF_CUDA_TUNE=fwd90=22 $fr verify --backends cuda --dtype bf16 --shape 2,2,1500,1100,64 --mask causal-bottom-right
for tool in racecheck memcheck; do
  step $tool-narrow-short-64 90 env FLASHREF_CUDA_TUNE=fwd90=21 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1000,1000,64 --mask causal
  step $tool-narrow-128 90 env FLASHREF_CUDA_TUNE=fwd90=21 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1100,128 --mask causal
done
tuned() {  # tuned KNOBS BINARY: a one-line wrapper that runs BINARY under FLASHREF_CUDA_TUNE=KNOBS
  local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f
}
step bits-narrow 120 scripts/cuda-bits $fr $(tuned fwd90=21 $fr) $(mktemp -d)
step properties-narrow 120 env FLASHREF_CUDA_TUNE=fwd90=21 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step family 90 $b/cuda_family_test --gtest_brief=1
step awkward-sm80-3xtf32 90 env FLASHREF_CUDA_FAMILY=3xtf32 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
step properties-sm80-3xtf32 120 env FLASHREF_CUDA_FAMILY=3xtf32 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
echo "suites done ${SECONDS}s"
if ((SECONDS < 440)); then
  base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
  family() {  # family NAME BINARY: a one-line wrapper that runs BINARY under FLASHREF_CUDA_FAMILY=NAME
    local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_FAMILY=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f
  }
  step bits-sm80-3xtf32 $((580 - SECONDS)) scripts/cuda-bits $(family 3xtf32 $base/bin/flashref) $(family 3xtf32 $fr) $(mktemp -d)
fi
date -u
