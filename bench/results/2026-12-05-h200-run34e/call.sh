#!/usr/bin/env bash
# Run 34e: the times of what run 34d checked, on its build, each beside what it would replace in
# the same call: the backward with the first dQ add stored (fused90=6) against b806fb9's
# (.device/base-bin.tar.xz) and this build's default and, at d = 128, fused90=5 (dQ converted by
# the fused kernel) beside them;
# float32's backward at d = 128 with f32bwd=1, 9 and 2 (the (2, 2) groups without their spill)
# beside the default; d = 64's leaderboard forward against fwd90=20 (run 34c's A/B on the
# default); and the d = 128 backward's tile order where it is above cuDNN's at long S (run 34b:
# S = 16k, B 2, 1.017x; 8k, B 4, 0.982x): its L2 budget's sections (order90 0 default, 1 one
# section, 2 twice the budget, 3 half).
# Here: the build of run 34d (.device, with base-bin.tar.xz); there: bash
# bench/results/2026-12-05-h200-run34e/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
mkdir -p $OUT
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
base=$(mktemp -d); tar -C $base -xJf .device/base-bin.tar.xz
bwd() {  # label binary shape mask [tune]
  echo "bench bwd $1 $3 $4 $(FLASHREF_CUDA_TUNE=${5:-} timeout 60 $2 bench --backends cuda --dtype bf16 --backward --reps 20 --warmup 3 --json --shape $3 --mask $4 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
}
# Arms: b806fb9 (base), this build's default (its fused kernels are b806fb9's: the control),
# the first dQ add stored (fused90=6) and dQ converted in the kernel (fused90=5), in an order
# that rotates each round. (fused90=5's wgmmas were serialized by ptxas at d = 128, C7512, and
# its d = 64 consumers spilled, as first landed; mended by its producer's registers, 56 -> 64,
# which also lets d = 64 run it.) (Wrong: 64 + 2 x 224 overcommits the block's registers, and
# fused90=5 hung in run 34g, where this script was never reached; perf-notes.)
arm() {  # arm NAME SHAPE
  case $1 in
    base) bwd base $base/bin/flashref $2 causal ;;
    default) bwd default $fr $2 causal ;;
    first-store) bwd first-store $fr $2 causal fused90=6 ;;
    convert) bwd convert $fr $2 causal fused90=5 ;;
  esac
}
# FLASHREF_ARMS: the arms to time (run 35a leaves out fused90=5's, which does not fit).
read -ra arms <<< "${FLASHREF_ARMS:-base default first-store convert}"
n=${#arms[@]}
# (Three rounds, not four, and one of the tile orders, not two: the session's device time went
# on machines that did not start.)
# FLASHREF_CALL_BUDGET (seconds, default none): each later round or section starts only while
# this script's time is under it, so that a call shortened by the device's budget still returns.
budget=${FLASHREF_CALL_BUDGET:-100000}
for round in 0 1 2; do
  ((SECONDS < budget)) || break
  for shape in 32,16,1024,1024,128 16,16,2048,2048,128 1,16,16384,16384,128 32,16,1024,1024,64; do
    for ((k = 0; k < n; ++k)); do arm ${arms[$(((k + round) % n))]} $shape; done
  done
done
# f32bwd=1 reaches ffma's plain passes when its time is ffma's, near f32bwd=9's (ffma's paired
# lanes: 8.2 ms in run 34a), not the default's 4.6.
for tune in - f32bwd=1 f32bwd=9 f32bwd=2 - f32bwd=2; do
  ((SECONDS < budget)) || break
  t=$tune; [[ $t == - ]] && t=""
  echo "bench f32 d128 backward [$t] $(FLASHREF_CUDA_TUNE=$t timeout 60 $fr bench --backends cuda --dtype f32 --backward --reps 10 --warmup 2 --json --shape 1,1,16384,16384,128 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
for tune in - fwd90=20 - fwd90=20; do
  ((SECONDS < budget)) || break
  t=$tune; [[ $t == - ]] && t=""
  echo "bench leaderboard [$t] $(FLASHREF_CUDA_TUNE=$t timeout 30 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --shape 1,16,16384,16384,64 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
done
for round in 1; do
  ((SECONDS < budget)) || break
  for shape in 4,16,8192,8192,128 2,16,16384,16384,128; do
    for v in 0 1 2 3; do
      echo "bench bwd order90=$v $shape $(FLASHREF_CUDA_TUNE=order90=$v timeout 60 $fr bench --backends cuda --dtype bf16 --backward --reps 15 --warmup 3 --json --shape $shape --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4)) for x in r])")"
    done
  done
done
date -u
