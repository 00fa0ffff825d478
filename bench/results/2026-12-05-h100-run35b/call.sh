#!/usr/bin/env bash
# Run 35b: the ordered fused backward storing its first dQ add as the default (run 35a timed it
# 7-11% faster on the backward), with the accumulator marked initialized for initcheck (which does
# not see the TMA's stores) and the claim tested by poisoning (FLASHREF_CUDA_TUNE poison90=1: the
# accumulator filled with NaN, so a tile read unwritten makes dQ NaN); fused90=5 deleted.
# - initcheck on the default where bottom-right leaves query tiles no key tile sees, and on the
#   short walks' kernel; memcheck, racecheck (where fused90=5 raced), synccheck;
# - the suites' problems poisoned, on the default and on the fused kernel everywhere (bwd90=1),
#   `verify` poisoned, determinism, the bits against b806fb9's fused kernel;
# - then the goal's table (bench/interleaved.py) through the Python package built there, and
#   float32's d = 128 backward with f32bwd=2 beside the default while time is left.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_determinism_test" scripts/device-build
# and b806fb9's flashref as .device/base-bin.tar.xz; there: bash
# bench/results/2026-12-05-h100-run35b/call.sh (it ran on an H100), carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
compute-sanitizer --version | tail -1; compute-sanitizer --help | grep -i -A1 nvtx
nvtx=""; compute-sanitizer --help | grep -q -- "--nvtx" && nvtx="--nvtx yes"
CS="compute-sanitizer $nvtx --print-limit 5 --error-exitcode 9"
V="$fr verify --backends cuda"
step initcheck-br-128 90 $CS --tool initcheck $V --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
step initcheck-br-64 90 $CS --tool initcheck $V --dtype f16 --shape 2,2,1300,1030,64 --mask causal-bottom-right
step initcheck-short-128 90 $CS --tool initcheck $V --dtype bf16 --shape 1,2,1100,1100,128 --mask causal
step initcheck-fused-small-64 60 env FLASHREF_CUDA_TUNE=bwd90=1 $CS --tool initcheck $V --dtype bf16 --shape 1,3,300,500,64 --mask none
step memcheck-br-128 60 $CS --tool memcheck $V --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
step racecheck-short-64 90 $CS --tool racecheck $V --dtype f16 --shape 2,2,1100,1100,64 --mask causal
step racecheck-br-128 90 $CS --tool racecheck $V --dtype bf16 --shape 1,2,1500,1100,128 --mask causal-bottom-right --heads-kv 1
step synccheck-short-128 60 $CS --tool synccheck $V --dtype bf16 --shape 1,2,1100,1100,128 --mask causal
step awkward-poisoned 90 env FLASHREF_CUDA_TUNE=poison90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused-poisoned 90 env FLASHREF_CUDA_TUNE=bwd90=1,poison90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step verify-poisoned-br-128 60 env FLASHREF_CUDA_TUNE=poison90=1 $V --dtype bf16 --shape 2,8,2000,1500,128 --mask causal-bottom-right --heads-kv 2
step verify-poisoned-nomask-64 60 env FLASHREF_CUDA_TUNE=poison90=1 $V --dtype f16 --shape 2,8,1024,2048,64 --mask none
base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
tuned() {  # tuned KNOBS BINARY: a one-line wrapper that runs BINARY under FLASHREF_CUDA_TUNE=KNOBS
  local f=$(mktemp); printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" > $f; chmod +x $f; echo $f
}
step bits-fused 120 scripts/cuda-bits $(tuned bwd90=1 $base/bin/flashref) $(tuned bwd90=1 $fr) $(mktemp -d)
echo "suites done ${SECONDS}s"
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
lim=$((585 - SECONDS)); ((lim > 240)) && lim=240
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
# Float32's backward at d = 128 with f32bwd=2 (the (2, 2) groups, spill-free since 2026-12-05)
# beside the default, alternating, while the call has time (run 34e's section, never reached).
for tune in - f32bwd=2 - f32bwd=2 - f32bwd=2; do
  ((SECONDS < 570)) || break
  t=$tune; [[ $t == - ]] && t=""
  echo "bench f32 d128 backward [$t] $(FLASHREF_CUDA_TUNE=$t timeout 20 $fr bench --backends cuda --dtype f32 --backward --reps 10 --warmup 2 --json --shape 1,1,16384,16384,128 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
date -u
