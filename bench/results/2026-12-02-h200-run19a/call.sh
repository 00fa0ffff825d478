#!/usr/bin/env bash
# Run 19a: two Q buffers in the sm90 forward (fwd90=8: 192-row d = 64 tiles, 9: 128-row d = 64
# tiles, 10: d = 128 at B_k = 96), tuning build. Candidates through the awkward shapes and the
# properties, then forward timings alternated with the defaults, two rounds. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
for c in 8 9 10 11; do
  step awkward-fwd90=$c 100 env FLASHREF_CUDA_TUNE=fwd90=$c $b/cuda_awkward_shapes_test --gtest_brief=1
done
for c in 8 9; do
  step properties-fwd90=$c 100 env RC_PARAMS=max_success=40 FLASHREF_CUDA_TUNE=fwd90=$c $b/cuda_properties_test --gtest_brief=1
done
step verify-1k-9 60 env FLASHREF_CUDA_TUNE=fwd90=9 $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-2k-8 60 env FLASHREF_CUDA_TUNE=fwd90=8 $fr verify --backends cuda --dtype bf16 --shape 4,8,2000,2000,64 --mask causal-bottom-right --heads-kv 2
step verify-1k-10 60 env FLASHREF_CUDA_TUNE=fwd90=10 $fr verify --backends cuda --dtype bf16 --shape 4,8,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-1k-11 60 env FLASHREF_CUDA_TUNE=fwd90=11 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1000,64 --mask causal --heads-kv 4
for c in 8 9; do step large-fwd90=$c 100 env FLASHREF_CUDA_TUNE=fwd90=$c $b/cuda_large_problems_test --gtest_brief=1; done
# Blocks that run two tiles or more (256 and 192 tiles on 132 blocks), under the tools.
for c in 8 9 10; do for tool in racecheck synccheck; do
  step $tool-fwd90=$c 100 env FLASHREF_CUDA_TUNE=fwd90=$c compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 4,16,512,512,$((c == 10 ? 128 : 64)) --heads-kv 4 --mask causal
done; done
j=$OUT/time/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2
  ((SECONDS > 540)) && return
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label $tune $((SECONDS-t0))s"
}
for round in 1 2; do
  for s in 1024 2048 4096 8192; do
    for t in "" fwd90=7 fwd90=8 fwd90=9 fwd90=11; do one "$t" "s$s,64" --shape $((32768 / s)),16,$s,$s,64 --mask causal; done
  done
  for t in "" fwd90=8 fwd90=9 fwd90=11; do one "$t" "lb,64" --shape 1,16,16384,16384,64 --mask causal; done
  for t in "" fwd90=8 fwd90=9 fwd90=11; do one "$t" "lb-nomask,64" --shape 1,16,16384,16384,64 --mask none; done
  for s in 1024 2048 4096; do
    for t in "" fwd90=10; do one "$t" "s$s,128" --shape $((32768 / s)),16,$s,$s,128 --mask causal; done
  done
  for t in "" fwd90=10; do one "$t" "lb,128" --shape 1,16,16384,16384,128 --mask causal; done
done
date -u
