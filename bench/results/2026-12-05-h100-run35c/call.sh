#!/usr/bin/env bash
# Run 35c: the fused backward's TMA epilogue with every consumer thread arriving on the tile
# index's barrier for itself (racecheck reported a WAR on that index at d = 64 in run 35b, and on
# b806fb9 too), and float32's d = 128 dK/dV pass on the (2, 2) groups as the default (f32bwd=2,
# -5% in runs 34a and 35b):
# - racecheck where run 35b's hazard was (d = 64 short walks, ordered and atomic), at d = 128,
#   and on two blocks (grid90=2: many tiles a block, every phase of the index's barrier);
# - the suites' problems on the default, the fused kernel everywhere poisoned, on two blocks
#   (ordered poisoned, and atomic), determinism; float32 on the sm90_3xtf32 family (its awkward
#   cases, `verify` at d = 128, memcheck);
# - the short walks' backward times (run 35a's first-store row: 1.094 ms at d = 128, 0.637 at 64
#   on an H100), then the goal's table through the Python package, then the bits against
#   b806fb9's fused kernel while time is left.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_determinism_test" scripts/device-build
# and b806fb9's flashref as .device/base-bin.tar.xz; there: bash
# bench/results/2026-12-05-h100-run35c/call.sh (it ran on an H100), carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
CS="compute-sanitizer --print-limit 5 --error-exitcode 9"
V="$fr verify --backends cuda"
step racecheck-short-64 60 $CS --tool racecheck $V --dtype f16 --shape 2,2,1100,1100,64 --mask causal
step racecheck-short-64-1024 60 $CS --tool racecheck $V --dtype f16 --shape 2,2,1024,1024,64 --mask causal
step racecheck-short-64-atomic 60 $CS --tool racecheck $V --dtype bf16 --shape 2,2,1100,1100,64 --mask causal --nondeterministic
step racecheck-short-128 60 $CS --tool racecheck $V --dtype bf16 --shape 2,2,1100,1100,128 --mask causal
step racecheck-two-blocks-64 90 env FLASHREF_CUDA_TUNE=grid90=2 $CS --tool racecheck $V --dtype f16 --shape 1,2,1100,1100,64 --mask causal
step synccheck-two-blocks-64 60 env FLASHREF_CUDA_TUNE=grid90=2 $CS --tool synccheck $V --dtype f16 --shape 1,2,1100,1100,64 --mask causal
step awkward 90 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused-poisoned 90 env FLASHREF_CUDA_TUNE=bwd90=1,poison90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-two-blocks-poisoned 120 env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,poison90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-two-blocks-atomic 120 env FLASHREF_CUDA_TUNE=grid90=2 FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step awkward-f32-3xtf32 90 env FLASHREF_CUDA_FAMILY=3xtf32 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
step verify-f32-128-br-gqa 60 $V --dtype f32 --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step memcheck-f32-128 60 $CS --tool memcheck $V --dtype f32 --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
echo "suites done ${SECONDS}s"
for shape in 32,16,1024,1024,128 32,16,1024,1024,64; do
  echo "bench bwd $shape $(timeout 60 $fr bench --backends cuda --dtype bf16 --backward --reps 20 --warmup 3 --json --shape $shape --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
lim=$((500 - SECONDS)); ((lim > 240)) && lim=240
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
tuned() {  # tuned KNOBS BINARY: a one-line wrapper that runs BINARY under FLASHREF_CUDA_TUNE=KNOBS
  local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f
}
lim=$((590 - SECONDS))
((lim > 30)) && step bits-fused $lim scripts/cuda-bits $(tuned bwd90=1 $base/bin/flashref) $(tuned bwd90=1 $fr) $(mktemp -d)
date -u
