#!/usr/bin/env bash
# Run 18c: the default build (no tuning variants) of the kept choices: tests, the SASS check,
# the goal's problems with PyTorch's peers in the same call, and compute-sanitizer on the
# awkward shapes' subset, both dQ strategies. Self-limited to 330 s.
set -u
cd "$(dirname "$0")/.."
date -u
cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step contract 60 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 100 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-other-strategy 100 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-sectioned 100 env FLASHREF_CUDA_TUNE=order90=4 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-long-tiles 100 env FLASHREF_CUDA_TUNE=fwd90=7 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-nd 100 env FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 100 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-other-sectioned 100 env RC_PARAMS=max_success=40 FLASHREF_CUDA_TUNE=bwd90=1,order90=4 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step tf32 120 $b/cuda_tf32_test --gtest_brief=1
step verify-cli 60 $fr verify --backends reference,cpu,cuda
step verify-gqa 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-1k 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step ring 100 $b/cuda_ring_test --gtest_brief=1
step ring-device 120 $b/cuda_ring_device_test --gtest_brief=1
cuobjdump --dump-sass $fr 2>/dev/null | awk '/Function :/ {fn=$3} /LDL|STL/ {s[fn]++} END {n=0; for (f in s) {print "spill", f, s[f]; n++} print "kernels with local-memory traffic:", n}' | tee $OUT/t/sass.txt | tail -1
(nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > $OUT/time/clocks.csv 2>&1 &)
j=$OUT/time/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label $tune $((SECONDS-t0))s"
}
one "" "lb,64" --shape 1,16,16384,16384,64 --mask causal
one "" "lb,128" --shape 1,16,16384,16384,128 --mask causal
one "order90=6" "lb,128" --shape 1,16,16384,16384,128 --mask causal
one "" "lb-nomask,64" --shape 1,16,16384,16384,64 --mask none
for s in 1024 2048 4096 8192 16384 32768; do for d in 64 128; do
  one "" "s$s,$d" --shape $((32768 / s)),16,$s,$s,$d --mask causal
done; done
one "order90=6" "s32768,128" --shape 1,16,32768,32768,128 --mask causal
pkill nvidia-smi
t0=$SECONDS
timeout 120 python3 bench/peers.py --out $OUT/time/peers.json --rep-ms 100 \
  --configs leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768 | sed 's/,$//') > $OUT/time/peers.log 2>&1
echo "peers rc=$? $((SECONDS-t0))s"
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
left() { local l=$((330 - SECONDS)); ((l > 60)) && l=60; echo $l; }
for tool in memcheck racecheck synccheck initcheck; do
  for tune in "" "bwd90=1"; do
    l=$(left); ((l > 15)) && step "$tool${tune:+-$tune}" $l env FLASHREF_CUDA_TUNE=$tune compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
  done
done
date -u
