#!/usr/bin/env bash
# Run 35a (written 2026-12-05 for the next session's first call): the first dQ add as the TMA's
# tensor store (fused90=6 since 554b52a; run 34g ran it as a plain bulk copy, whose writes
# initcheck does not see), fused90=5 with its producer's converter one float4 a lane (53cb4e9;
# it hung in run 34g on a register split past the launch's), then the times run 34e never
# reached, inside one call.
# - initcheck and memcheck where bottom-right leaves query tiles no key tile sees (d = 128 and
#   64): initcheck flagged every read of the stored tiles in run 34g; it must now pass;
# - the fused kernel on the suites' problems with the first store (bwd90=1,fused90=6),
#   determinism, `verify`, and the bits against b806fb9's fused kernel (scripts/cuda-bits,
#   .device/base-bin.tar.xz): the same bits as run 34g's bulk copy gave;
# - `verify` at S = 4k (run 34d's last step, not reached in 34g);
# - fused90=5's suites, sanitizers and bits;
# - then run 34e's times (fused90=5's arm only if its suites passed), each section only while
#   FLASHREF_CALL_BUDGET allows.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_determinism_test" scripts/device-build,
# and b806fb9's flashref as .device/base-bin.tar.xz (run 34d's header); there:
#   bash bench/results/2026-12-05-h100-run35a/call.sh (it ran on an H100), carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
for tool in initcheck memcheck; do
  step $tool-first-store-br-128 90 env FLASHREF_CUDA_TUNE=fused90=6 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
  step $tool-first-store-br-64 90 env FLASHREF_CUDA_TUNE=fused90=6 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1300,1030,64 --mask causal-bottom-right
done
# The short walks' kernel (dK and dV by the TMA too): S_k >= 1024 fused, a walk of <= 1,024 queries.
step initcheck-first-store-short-128 90 env FLASHREF_CUDA_TUNE=fused90=6 compute-sanitizer --tool initcheck --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1100,128 --mask causal
step awkward-first-store 90 env FLASHREF_CUDA_TUNE=bwd90=1,fused90=6 $b/cuda_awkward_shapes_test --gtest_brief=1
step determinism-first-store 60 env FLASHREF_CUDA_TUNE=bwd90=1,fused90=6 $b/cuda_determinism_test --gtest_brief=1
step verify-first-store-br-128 60 env FLASHREF_CUDA_TUNE=fused90=6 $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,1500,128 --mask causal-bottom-right --heads-kv 2
step verify-first-store-nomask-64 60 env FLASHREF_CUDA_TUNE=fused90=6 $fr verify --backends cuda --dtype bf16 --shape 2,8,1024,2048,64 --mask none
base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
tuned() {  # tuned KNOBS BINARY: a one-line wrapper that runs BINARY under FLASHREF_CUDA_TUNE=KNOBS
  local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f
}
step bits-first-store 120 scripts/cuda-bits $(tuned bwd90=1 $base/bin/flashref) $(tuned bwd90=1,fused90=6 $fr) $(mktemp -d)
step verify-bf16-4k 30 $fr verify --backends cuda --dtype bf16 --shape 1,8,4096,4096,64 --mask causal --heads-kv 2
# fused90=5 with its producer converting one float4 at a time (no C7512, no spill; d = 128 on
# the staged epilogue): the suites' problems, the sanitizers on one problem a d, the bits. It
# hung in run 34g on a split past the launch's registers (now refused at compile time).
step awkward-convert 60 env FLASHREF_CUDA_TUNE=bwd90=1,fused90=5 $b/cuda_awkward_shapes_test --gtest_brief=1
for tool in initcheck racecheck; do
  step $tool-convert-br-128 90 env FLASHREF_CUDA_TUNE=fused90=5 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
  step $tool-convert-short-64 90 env FLASHREF_CUDA_TUNE=fused90=5 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1100,1100,64 --mask causal
done
step verify-convert-nomask-128 60 env FLASHREF_CUDA_TUNE=fused90=5 $fr verify --backends cuda --dtype f16 --shape 2,4,1100,2100,128 --mask none --heads-kv 2
step bits-convert 120 scripts/cuda-bits $(tuned bwd90=1 $base/bin/flashref) $(tuned bwd90=1,fused90=5 $fr) $(mktemp -d)
t=$SECONDS
echo "suites done ${t}s"
# The convert arm only where awkward-convert passed.
arms="base default first-store"
grep -q "^awkward-convert rc=0 " $OUT/steps.txt && arms="$arms convert"
FLASHREF_CALL_BUDGET=$((440 - t)) FLASHREF_ARMS="$arms" \
  bash bench/results/2026-12-05-h200-run34e/call.sh > $OUT/times.txt 2>&1
cat $OUT/times.txt
date -u
