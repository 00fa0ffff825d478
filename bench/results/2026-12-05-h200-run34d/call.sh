#!/usr/bin/env bash
# Run 34d: the suites on everything changed since run 34c, no timing (run 34e times them, 34f
# runs the Python part; all three on this build).
# - d = 64's 192-row forward with the rows past the fold's range by a kernel of their own, the
#   default since run 34c: the awkward shapes, also with fwd90=7 (the 192-row tiles on the
#   suites' short problems), memcheck on CudaLargeScores (now at B = 2), `verify` at S = 4k; that
#   kernel's grid numbered in x, so a batch past 65,535 runs (CudaLarge.BatchesPast65535*, 35 GB).
# - f32bwd=1 on the sm90_3xtf32 family reaching ffma's plain passes; f32bwd=2, the 3xTF32 dK/dV
#   pass's (2, 2) groups at d = 128 without their spill: the float32 suites on it.
# - The ordered fused backward's first dQ add as a bulk store, its accumulator not zeroed by the
#   preprocess (fused90=6, a tuning variant until this passes): the suites with the fused kernel
#   everywhere (bwd90=1), determinism, initcheck and memcheck where bottom-right leaves query
#   tiles no key tile sees, `verify`, and the bits against the session's first commit (b806fb9's
#   flashref, .device/base-bin.tar.xz).
# - fused90=5, d = 128's ordered kernels converting dQ themselves (bwd_dq_convert.cuh, no
#   postprocess kernel): the same checks, racecheck too.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_determinism_test
# cuda_large_problems_test" scripts/device-build (44 MB of .device with the base below: the
# properties and family suites too pass the call's 64 MiB; CI runs the family suite, host logic),
# and b806fb9's flashref (FLASHREF_DEVICE_VARIANTS=0) as .device/base-bin.tar.xz; there: bash
# bench/results/2026-12-05-h200-run34d/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step awkward 40 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fwd90-7 40 env FLASHREF_CUDA_TUNE=fwd90=7 $b/cuda_awkward_shapes_test --gtest_brief=1
step memcheck-large-scores 90 compute-sanitizer --tool memcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaLargeScores.*'
step large-batches 120 $b/cuda_large_problems_test --gtest_brief=1 --gtest_filter='CudaLarge.Batches*'
step f32bwd1-plain 60 env FLASHREF_CUDA_TUNE=f32bwd=1 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
# And the dK/dV pass's (2, 2) groups at d = 128 without their spill (f32bwd=2: 5% under the
# default in run 34a, with it): the float32 suites on it, then its time beside the default's.
step f32bwd2-awkward 60 env FLASHREF_CUDA_TUNE=f32bwd=2 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*:*Float32*'
step f32bwd2-verify 60 env FLASHREF_CUDA_TUNE=f32bwd=2 $fr verify --backends cuda --dtype f32 --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step f32bwd2-memcheck 90 env FLASHREF_CUDA_TUNE=f32bwd=2 compute-sanitizer --tool memcheck --error-exitcode 9 $fr verify --backends cuda --dtype f32 --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
# The first dQ add stored (fused90=6): the fused kernel on the suites' problems (bwd90=1), the
# sanitizers where bottom-right leaves query tiles no key tile sees, `verify`, determinism, and
# the bits against b806fb9 (the default's too: its kernels are b806fb9's but the rows kernel).
step awkward-fused 90 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-first-store 90 env FLASHREF_CUDA_TUNE=bwd90=1,fused90=6 $b/cuda_awkward_shapes_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step determinism-first-store 60 env FLASHREF_CUDA_TUNE=bwd90=1,fused90=6 $b/cuda_determinism_test --gtest_brief=1
for tool in initcheck memcheck; do
  step $tool-first-store-br-128 90 env FLASHREF_CUDA_TUNE=fused90=6 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
  step $tool-first-store-br-64 90 env FLASHREF_CUDA_TUNE=fused90=6 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1300,1030,64 --mask causal-bottom-right
done
step verify-first-store-br-128 60 env FLASHREF_CUDA_TUNE=fused90=6 $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,1500,128 --mask causal-bottom-right --heads-kv 2
step verify-first-store-nomask-64 60 env FLASHREF_CUDA_TUNE=fused90=6 $fr verify --backends cuda --dtype bf16 --shape 2,8,1024,2048,64 --mask none
base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
tuned() {  # tuned KNOBS BINARY: a one-line wrapper that runs BINARY under FLASHREF_CUDA_TUNE=KNOBS
  local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f
}
step bits-default 120 scripts/cuda-bits $base/bin/flashref $fr $(mktemp -d)
step bits-fused 120 env FLASHREF_CUDA_TUNE=bwd90=1 scripts/cuda-bits $base/bin/flashref $fr $(mktemp -d)
# (The base has no fused90=6: its fused kernel under bwd90=1 alone, the new one's with 6.)
step bits-first-store 120 scripts/cuda-bits $(tuned bwd90=1 $base/bin/flashref) $(tuned bwd90=1,fused90=6 $fr) $(mktemp -d)
step awkward-convert 90 env FLASHREF_CUDA_TUNE=bwd90=1,fused90=5 $b/cuda_awkward_shapes_test --gtest_brief=1
for tool in initcheck memcheck racecheck; do
  step $tool-convert-br-128 120 env FLASHREF_CUDA_TUNE=fused90=5 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
done
# (d = 64 too since 2026-12-05's mend of the producer's registers: memcheck, racecheck, verify.)
for tool in memcheck racecheck; do
  step $tool-convert-br-64 120 env FLASHREF_CUDA_TUNE=fused90=5 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1300,1030,64 --mask causal-bottom-right
done
step verify-convert-causal-64 60 env FLASHREF_CUDA_TUNE=fused90=5 $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,2000,64 --mask causal --heads-kv 4
step verify-convert-nomask-128 60 env FLASHREF_CUDA_TUNE=fused90=5 $fr verify --backends cuda --dtype f16 --shape 2,4,1100,2100,128 --mask none --heads-kv 2
step bits-convert 120 scripts/cuda-bits $(tuned bwd90=1 $base/bin/flashref) $(tuned bwd90=1,fused90=5 $fr) $(mktemp -d)
step verify-bf16-4k 30 $fr verify --backends cuda --dtype bf16 --shape 1,8,4096,4096,64 --mask causal --heads-kv 2
date -u
