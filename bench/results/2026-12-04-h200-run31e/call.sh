#!/usr/bin/env bash
# Run 31e: the suites that run the sm90 backward from other callers (the ring's placed blocks,
# on the host and on the device) and TF32, on the new defaults, with the ring's sanitizers.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step ring 240 $b/cuda_ring_test --gtest_brief=1
step ring-device 300 $b/cuda_ring_device_test --gtest_brief=1
step ring-device-fused 300 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_ring_device_test --gtest_brief=1
step tf32 120 $b/cuda_tf32_test --gtest_brief=1
step verify-ring-cli 120 $fr verify --ranks 3 --backends cuda --dtype bf16 --shape 1,4,3000,3000,128 --mask causal
step memcheck-ring 200 env RC_PARAMS=max_success=8 compute-sanitizer --tool memcheck --error-exitcode 9 $b/cuda_ring_device_test --gtest_brief=1 --gtest_filter='RingDevice.OneToFour*'
date -u
