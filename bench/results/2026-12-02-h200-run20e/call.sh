#!/usr/bin/env bash
# Run 20e: on c8e359a's default build, the cuda suites runs 20a-20d left out: the backend
# contract, the ring's tests, the sm80 family's properties and determinism (its dK/dV kernel
# shares the P step changed in 43cbbd0), TF32, initcheck and synccheck on the awkward subset
# with both deterministic strategies, and fuzzing. Self-limited to 170 s.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; ((SECONDS + 5 > 170)) && { echo "$name skipped"; return; }; ((SECONDS + lim > 170)) && lim=$((170 - SECONDS)); local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
step contract 30 $b/cuda_backend_contract_test --gtest_brief=1
step initcheck 40 compute-sanitizer --tool initcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
step initcheck-other-dq 40 env FLASHREF_CUDA_TUNE=bwd90=1 compute-sanitizer --tool initcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
step synccheck-other-dq 40 env FLASHREF_CUDA_TUNE=bwd90=1 compute-sanitizer --tool synccheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
step sm80-properties 40 env FLASHREF_CUDA_FAMILY=sm80 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step sm80-determinism 30 env FLASHREF_CUDA_FAMILY=sm80 $b/cuda_determinism_test --gtest_brief=1
step ring 40 $b/cuda_ring_test --gtest_brief=1
step ring-device 50 $b/cuda_ring_device_test --gtest_brief=1
step tf32 40 $b/cuda_tf32_test --gtest_brief=1
step fuzz-cuda 30 $fr fuzz --backend cuda --seconds 20 --max-seq 400 --seed $(date +%s)
date -u
