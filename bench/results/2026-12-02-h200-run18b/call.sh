#!/usr/bin/env bash
# Run 18b: the new preprocess, sections that count the fused dQ accumulator, the fused
# backward's wave rule at four tiles: tests, the candidates (backward) alternated with the
# default, the goal's problems, PyTorch's peers, then memcheck and initcheck on the awkward shapes.
set -u
cd "$(dirname "$0")/.."
root=$PWD
date -u
cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step contract 60 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 120 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-nd 120 env FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-sectioned 120 env FLASHREF_CUDA_TUNE=order90=4 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-fused 120 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-long-tiles 120 env FLASHREF_CUDA_TUNE=fwd90=7 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 120 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-nd 120 env RC_PARAMS=max_success=40 FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_properties_test --gtest_brief=1
step properties-fused-sectioned 120 env RC_PARAMS=max_success=40 FLASHREF_CUDA_TUNE=bwd90=1,order90=4 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 120 $b/cuda_large_problems_test --gtest_brief=1
step tf32 150 $b/cuda_tf32_test --gtest_brief=1
step verify-cli 60 $fr verify --backends reference,cpu,cuda
step verify 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1000,128 --mask causal --heads-kv 4
step verify-nd 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1000,64 --mask causal --nondeterministic
step ring 120 $b/cuda_ring_test --gtest_brief=1
step ring-device 150 $b/cuda_ring_device_test --gtest_brief=1
mkdir -p $OUT/time
(nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > $OUT/time/clocks.csv 2>&1 &)
j=$OUT/time/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label $tune $* $((SECONDS-t0))s"
}
for d in 64 128; do
  p="--shape 32,16,1024,1024,$d --mask causal"
  one "" "s1k,$d" $p
  one "order90=2" "s1k,$d" $p
  one "bwd90=1" "s1k,$d" $p
  one "bwd90=1,order90=2" "s1k,$d" $p
  one "" "s1k,$d-nd" $p --nondeterministic
  one "" "s2k,$d" --shape 16,16,2048,2048,$d --mask causal
  one "bwd90=1" "s2k,$d" --shape 16,16,2048,2048,$d --mask causal
  one "" "s4k,$d" --shape 8,16,4096,4096,$d --mask causal
  one "bwd90=1" "s4k,$d" --shape 8,16,4096,4096,$d --mask causal
  one "" "s8k,$d" --shape 4,16,8192,8192,$d --mask causal
  one "order90=2" "s8k,$d" --shape 4,16,8192,8192,$d --mask causal
  one "" "s16k,$d" --shape 2,16,16384,16384,$d --mask causal
  one "order90=5" "s16k,$d" --shape 2,16,16384,16384,$d --mask causal
  one "" "s32k,$d" --shape 1,16,32768,32768,$d --mask causal
  one "" "lb,$d" --shape 1,16,16384,16384,$d --mask causal
done
one "" "lb-nomask,64" --shape 1,16,16384,16384,64 --mask none
pkill nvidia-smi
t0=$SECONDS
timeout 200 python3 bench/peers.py --out $OUT/time/peers.json --rep-ms 100 \
  --configs leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768 | sed 's/,$//') > $OUT/time/peers.log 2>&1
echo "peers rc=$? $((SECONDS-t0))s"
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
left() { local l=$((535 - SECONDS)); ((l > 100)) && l=100; echo $l; }
l=$(left); ((l > 30)) && step memcheck $l compute-sanitizer --tool memcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
l=$(left); ((l > 30)) && step memcheck-nd-sectioned $l env FLASHREF_TEST_NONDETERMINISTIC=1 FLASHREF_CUDA_TUNE=order90=4 compute-sanitizer --tool memcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
l=$(left); ((l > 30)) && step initcheck $l compute-sanitizer --tool initcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
date -u
