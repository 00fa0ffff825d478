#!/usr/bin/env bash
# Run 34d: d = 64's 192-row forward with the rows past the fold's range by a kernel of their own
# as the default (run 34c measured it as fwd90=20): the suites that reach it on the default
# (CudaLargeScores and the awkward shapes, also with fwd90=7, which runs the 192-row tiles on
# the suites' short problems; memcheck on CudaLargeScores; `verify` at S = 4k), and the
# leaderboard's forward against fwd90=20 (now the rows in the kernel). Added after it was
# written, with the change it checks: that kernel's grid numbered in x (a batch past 65,535:
# CudaLarge.BatchesPast65535*, 35 GB, and CudaLargeScores now at B = 2), and f32bwd=1 on the
# sm90_3xtf32 family reaching ffma's plain passes. Then, through the Python package built
# there, where our forward+backward's time beyond the sum of its passes goes (bench/
# fb_excess.py: 0.22 ms on the d = 128 leaderboard in run 34b, cuDNN's 0.05, which decides that
# problem's goal), with nvidia-smi's clocks sampled beside it, and the goal's table on the new
# d = 64 default.
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
step verify-bf16-4k 30 $fr verify --backends cuda --dtype bf16 --shape 1,8,4096,4096,64 --mask causal --heads-kv 2
for tune in - fwd90=20 - fwd90=20; do
  t=$tune; [[ $t == - ]] && t=""
  echo "bench leaderboard [$t] $(FLASHREF_CUDA_TUNE=$t timeout 30 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --shape 1,16,16384,16384,64 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
smi=$!
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 120 python3 fb_excess.py --out $OUT/fb_excess.json --configs leaderboard128,leaderboard) > $OUT/fb_excess.log 2>&1
echo "fb_excess rc=$? $((SECONDS-t0))s"; grep -v "^    " $OUT/fb_excess.log | cut -c1-200
kill $smi
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
lim=$((585 - SECONDS)); ((lim > 240)) && lim=240
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
date -u
