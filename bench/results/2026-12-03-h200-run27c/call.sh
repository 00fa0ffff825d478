#!/usr/bin/env bash
# Run 27c: the default build with d = 64's no-mask backward on a block per key tile: the suites
# that reach it, then the goal's table in alternation through the Python layer (built there
# from this tree). Self-limited to about 400 s.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
ND=FLASHREF_TEST_NONDETERMINISTIC=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 60 env $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step verify-nomask-64 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,2000,64 --mask none
step verify-nomask-64-gqa 60 $fr verify --backends cuda --dtype f16 --shape 2,8,1500,2100,64 --mask none --heads-kv 2 --grad-dtype f32
for tool in racecheck synccheck memcheck; do
  step $tool-nomask-64 60 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,64 --heads-kv 2 --mask none
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 230 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; tail -22 $OUT/interleaved.log
date -u
