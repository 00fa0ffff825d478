#!/usr/bin/env bash
# Run 34d: d = 64's 192-row forward with the rows past the fold's range by a kernel of their own
# as the default (run 34c measured it as fwd90=20): the suites that reach it on the default
# (CudaLargeScores and the awkward shapes, also with fwd90=7, which runs the 192-row tiles on
# the suites' short problems; memcheck on CudaLargeScores; `verify` at S = 4k), and the
# leaderboard's forward against fwd90=20 (now the rows in the kernel). Added after it was
# written, with the change it checks: that kernel's grid numbered in x (a batch past 65,535:
# CudaLarge.BatchesPast65535*, 35 GB, and CudaLargeScores now at B = 2), and f32bwd=1 on the
# sm90_3xtf32 family reaching ffma's plain passes. (The Python part, written with it, is run
# 34e's call.)
# Also the ordered fused backward's first dQ add as a bulk store, its accumulator no longer
# zeroed by the preprocess (2026-12-05): the suites with the fused kernel everywhere (bwd90=1),
# initcheck and memcheck where bottom-right leaves query tiles no key tile sees, `verify`, the
# bits against the session's first commit (b806fb9, staged as .device/base-bin.tar.xz), and
# the backward's time against it in alternation.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test
# cuda_determinism_test cuda_large_problems_test" scripts/device-build, and b806fb9's flashref
# (FLASHREF_DEVICE_VARIANTS=0) as .device/base-bin.tar.xz; there: bash
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
# f32bwd=1 reaches ffma's plain passes when its time is ffma's, near f32bwd=9's (ffma's paired
# lanes: 8.2 ms in run 34a), not the default's 4.6.
# And the dK/dV pass's (2, 2) groups at d = 128 without their spill (f32bwd=2: 5% under the
# default in run 34a, with it): the float32 suites on it, then its time beside the default's.
step f32bwd2-awkward 60 env FLASHREF_CUDA_TUNE=f32bwd=2 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*:*Float32*'
step f32bwd2-properties 60 env FLASHREF_CUDA_TUNE=f32bwd=2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step f32bwd2-verify 60 env FLASHREF_CUDA_TUNE=f32bwd=2 $fr verify --backends cuda --dtype f32 --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step f32bwd2-memcheck 90 env FLASHREF_CUDA_TUNE=f32bwd=2 compute-sanitizer --tool memcheck --error-exitcode 9 $fr verify --backends cuda --dtype f32 --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
for tune in - f32bwd=1 f32bwd=9 f32bwd=2 - f32bwd=2; do
  t=$tune; [[ $t == - ]] && t=""
  echo "bench f32 d128 backward [$t] $(FLASHREF_CUDA_TUNE=$t timeout 60 $fr bench --backends cuda --dtype f32 --backward --reps 10 --warmup 2 --json --shape 1,1,16384,16384,128 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
# The first dQ add stored: the fused kernel on the suites' problems, sanitizers where tiles see
# no key, the bits, and the time.
step awkward-fused 90 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
for tool in initcheck memcheck; do
  step $tool-fused-br-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
  step $tool-fused-br-64 90 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 2,2,1300,1030,64 --mask causal-bottom-right
done
step verify-fused-br-128 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,1500,128 --mask causal-bottom-right --heads-kv 2
step verify-fused-nomask-64 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1024,2048,64 --mask none
base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
step bits-fused 120 env FLASHREF_CUDA_TUNE=bwd90=1 LD_LIBRARY_PATH=$w/lib scripts/cuda-bits $base/bin/flashref $fr $(mktemp -d)
step bits-default 120 env LD_LIBRARY_PATH=$w/lib scripts/cuda-bits $base/bin/flashref $fr $(mktemp -d)
bwd() {  # label binary shape mask
  echo "bench bwd $1 $3 $4 $(timeout 60 $2 bench --backends cuda --dtype bf16 --backward --reps 20 --warmup 3 --json --shape $3 --mask $4 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
}
for round in 1 2 3; do
  for shape in 32,16,1024,1024,128 16,16,2048,2048,128 1,16,16384,16384,128 32,16,1024,1024,64; do
    if ((round % 2)); then bwd base $base/bin/flashref $shape causal; bwd new $fr $shape causal
    else bwd new $fr $shape causal; bwd base $base/bin/flashref $shape causal; fi
  done
done
step verify-bf16-4k 30 $fr verify --backends cuda --dtype bf16 --shape 1,8,4096,4096,64 --mask causal --heads-kv 2
for tune in - fwd90=20 - fwd90=20; do
  t=$tune; [[ $t == - ]] && t=""
  echo "bench leaderboard [$t] $(FLASHREF_CUDA_TUNE=$t timeout 30 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --shape 1,16,16384,16384,64 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
date -u
