#!/usr/bin/env bash
# Run 38a (2026-12-05, the session after run 37d): the forward's step variants written since run
# 37d, checked (awkward shapes; 24's and 25's bits against the default) and timed against the
# default, two rounds alternating: fwd90=11 (the deferral in one pass), 24 (the consumer's index
# provably warp-uniform), 25 (24 and 23, the wgmma descriptors advanced) and 26 (25 and 11, at
# d = 64). 23 alone is checked, not timed: 24 against 25 tells what the advance adds.
# First compute-sanitizer (the four tools) on d = 128's deferred rescale, the default since
# 0d1a151, never under the tools (run 37d ran out of device time); seconds each (run 37a).
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test" scripts/device-build; there: bash
# bench/results/2026-12-05-h100-run38a/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
san() { local tool=$1; shift; step "$tool-$1" 60 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 "${@:2}"; }
for tool in memcheck racecheck synccheck initcheck; do
  san $tool d128-persistent --shape 2,40,512,512,128 --mask causal
done
san memcheck d128-large-gqa --shape 2,8,1000,1000,128 --mask causal-bottom-right --heads-kv 2 --large
# L near 0 after a deferred rescale on the defaults (CudaPeakedRows, new since run 37d: the rule
# gained the conditional rescale's lag; docs/verification.md).
step peaked-rows 60 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaPeakedRows*'
for v in 24 25 26 23 11; do step awkward-$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1; done
for round in 0 1; do
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64; do
    vs=(0 24 25 26 11); ((round)) && vs=(11 26 25 24 0)
    for v in "${vs[@]}"; do fwd v$v $shape fwd90=$v; done
  done
  for shape in 32,16,1024,1024,128 1,16,16384,16384,128; do
    vs=(0 24 25); ((round)) && vs=(25 24 0)
    for v in "${vs[@]}"; do fwd v$v $shape fwd90=$v; done
  done
done | tee $OUT/times.txt
((SECONDS < 480)) && step bits-25 110 scripts/cuda-bits $fr $(tuned fwd90=25 $fr) $(mktemp -d)
date -u
