#!/usr/bin/env bash
# Run 37d (2026-12-05): the deferred rescale as d = 128's default (commit in .device/commit):
# its suites (awkward shapes, properties, `verify` with large scores, the cuda fuzz), then the
# goal's table (bench/interleaved.py) beside the peers. The session's last ~390 s of device time.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test" scripts/device-build;
# there: bash bench/results/2026-12-05-h100-run37d/call.sh, carrying .device (timeout_s 380).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step verify-d128-large 60 $fr verify --backends cuda --dtype f16 --shape 2,8,1000,1000,128 --mask causal --heads-kv 2 --large
step verify-d128-long 60 $fr verify --backends cuda --dtype bf16 --shape 1,2,2048,2048,128 --mask causal
step fuzz-cuda 90 $fr fuzz --backend cuda --seconds 40 --max-seq 400 --seed $(date +%s)
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 100 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt; grep "^|" $OUT/interleaved.log | tail -22
date -u
