#!/usr/bin/env bash
# Run 39a (2026-12-06): run 38d's checks and times (d = 128's store warp sleeping between its
# waits' tries, fwd90=27 and 29 with narrow steps, against the default; d = 64's short tiles at
# 4k causal and at 2k without the mask, fwd90=28), then compute-sanitizer on the new default's
# short tiles at S = 2k, then every cuda suite, the cuda fuzz and compute-sanitizer on this
# commit's defaults (`scripts/device-run tests sanitize`, which runs the properties and the large
# problems too) with what is left of 590 s.
# Here: scripts/device-build (every suite); there: bash bench/results/2026-12-06-run39a/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
for v in 27 29 28; do step awkward-$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1; done
san() { local v=$1 tool=$2; shift 2; step "$tool-$v" 60 env FLASHREF_CUDA_TUNE=fwd90=$v compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify --backends cuda --dtype bf16 "$@"; }
san 29 racecheck --shape 2,40,512,512,128 --mask causal
san 29 synccheck --shape 2,40,512,512,128 --mask causal
step verify-2k 60 $fr verify --backends cuda --dtype bf16 --shape 1,4,2000,2048,64 --mask causal-bottom-right
step verify-28-4k 60 env FLASHREF_CUDA_TUNE=fwd90=28 $fr verify --backends cuda --dtype f16 --shape 1,4,4000,4000,64 --mask causal --heads-kv 2
step verify-28-nomask 60 env FLASHREF_CUDA_TUNE=fwd90=28 $fr verify --backends cuda --dtype bf16 --shape 1,4,2000,1800,64 --mask none
fwdm() {  # LABEL SHAPE MASK TUNE
  echo "bench fwd $1 $2 $3 $(FLASHREF_CUDA_TUNE=$4 timeout 60 "$fr" bench --backends cuda --dtype bf16 \
    --reps 30 --warmup 5 --json --shape "$2" --mask $3 2>&1 | tr -d '\n' | python3 -c \
    "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
for round in 0 1; do
  pair() { local shape=$1 mask=$2 v=$3; if ((round)); then fwdm v$v $shape $mask fwd90=$v; fwdm v0 $shape $mask fwd90=0; else fwdm v0 $shape $mask fwd90=0; fwdm v$v $shape $mask fwd90=$v; fi; }
  pair 8,16,4096,4096,64 causal 28
  pair 16,16,2048,2048,64 none 28
  for shape in 32,16,1024,1024,128 1,16,16384,16384,128; do
    vs=(0 27 29); ((round)) && vs=(29 27 0)
    for v in "${vs[@]}"; do fwdm v$v $shape causal fwd90=$v; done
  done
done | tee $OUT/times.txt
echo "timing done ${SECONDS}s"
for tool in racecheck memcheck synccheck; do
  step $tool-2k 60 compute-sanitizer --tool $tool --print-limit 5 --error-exitcode 9 $fr verify \
    --backends cuda --dtype bf16 --shape 1,4,1500,2048,64 --mask causal-bottom-right --forward-only
done
OUT=$OUT/run timeout $((590 - SECONDS)) bash scripts/device-run tests sanitize >$OUT/device-run.log 2>&1
echo "device-run rc=$? ${SECONDS}s"
tail -100 $OUT/run/summary.txt 2>/dev/null
date -u
