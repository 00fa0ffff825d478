#!/usr/bin/env bash
# Run 34d: d = 64's 192-row forward with the rows past the fold's range by a kernel of their own
# as the default (run 34c measured it as fwd90=20): the suites that reach it on the default
# (CudaLargeScores and the awkward shapes, also with fwd90=7, which runs the 192-row tiles on
# the suites' short problems; memcheck on CudaLargeScores; `verify` at S = 4k), and the
# leaderboard's forward against fwd90=20 (now the rows in the kernel). Added after it was
# written, with the change it checks: that kernel's grid numbered in x (a batch past 65,535:
# CudaLarge.BatchesPast65535*, 35 GB, and CudaLargeScores now at B = 2), and f32bwd=1 on the
# sm90_3xtf32 family reaching ffma's plain passes.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test
# cuda_determinism_test cuda_large_problems_test" scripts/device-build; there: bash
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
step memcheck-large-scores 40 compute-sanitizer --tool memcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaLargeScores.*'
step large-batches 120 $b/cuda_large_problems_test --gtest_brief=1 --gtest_filter='CudaLarge.Batches*'
step f32bwd1-plain 60 env FLASHREF_CUDA_TUNE=f32bwd=1 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
# f32bwd=1 reaches ffma's plain passes when its time is ffma's, near f32bwd=9's (ffma's paired
# lanes: 8.2 ms in run 34a), not the default's 4.6.
for tune in - f32bwd=1 f32bwd=9; do
  t=$tune; [[ $t == - ]] && t=""
  echo "bench f32 d128 backward [$t] $(FLASHREF_CUDA_TUNE=$t timeout 60 $fr bench --backends cuda --dtype f32 --backward --reps 10 --warmup 2 --json --shape 1,1,16384,16384,128 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
step verify-bf16-4k 30 $fr verify --backends cuda --dtype bf16 --shape 1,8,4096,4096,64 --mask causal --heads-kv 2
for tune in - fwd90=20 - fwd90=20; do
  t=$tune; [[ $t == - ]] && t=""
  echo "bench leaderboard [$t] $(FLASHREF_CUDA_TUNE=$t timeout 30 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --shape 1,16,16384,16384,64 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
date -u
