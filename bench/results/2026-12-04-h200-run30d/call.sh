#!/usr/bin/env bash
# Run 30d (after run 30c): the default build with d = 64's short forward tiles handed over by
# the producer, Q a tile ahead (FwdTraitsHandTile). Here: FLASHREF_DEVICE_TESTS=
# "cuda_awkward_shapes_test cuda_properties_test cuda_determinism_test cuda_large_problems_test
# cuda_family_test" scripts/device-build; there: bash .device/call30d.sh, carrying .device.
# The suites and sanitizers on the default, then the goal's table through the Python layer.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step family 30 $b/cuda_family_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-64-short-br 60 $fr verify --backends cuda --dtype bf16 --shape 2,16,1000,400,64 --mask causal-bottom-right --heads-kv 4
step verify-64-short-f16 60 $fr verify --backends cuda --dtype f16 --shape 4,16,1024,1024,64 --mask causal
step verify-64-short-nomask 60 $fr verify --backends cuda --dtype bf16 --shape 3,8,700,900,64 --mask none --heads-kv 1
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-64-short 90 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,64 --mask causal-bottom-right
done
step fuzz 15 $fr fuzz --backend cuda --seconds 8 --max-seq 1024 --seed $(date +%s)
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
# (Run 30d's first call was lost with the machine; with the device time left, the one row the
# change moves, and its d = 128 neighbour as a control.)
configs=fa3grid-s1024-d64,fa3grid-s1024-d128
t0=$SECONDS
lim=$((230 - SECONDS)); ((lim > 90)) && lim=90
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log
# At most 8 files come back.
(cd $OUT && find . -type f ! -name interleaved.json ! -name interleaved.log ! -name tests.log ! -name python-build.log -delete)
date -u
