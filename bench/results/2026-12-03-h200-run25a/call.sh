#!/usr/bin/env bash
# Run 25a: exact float32 as 3xTF32 (sm80_3xtf32, commit 2bf148e+): the suites (float32 now on
# 3xTF32 at d <= 128; ffma and the d = 128 tile variants on every float32 case), the
# sanitizers on float32 cases of both families, a look at racecheck's ring hang, then the
# float32 problems beside the memory-efficient kernel in alternation: 3xTF32, its d = 128
# variants, and ffma.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
t0=$SECONDS
OUT=$OUT/suites bash scripts/device-run tests > /dev/null 2>&1
echo "suites rc=$? $((SECONDS-t0))s"; grep -vE ' ok ' $OUT/suites/summary.txt | head -20
grep -E 'ffma|3xtf32|awkward_shapes_test|properties_test ' $OUT/suites/summary.txt
work=$(mktemp -d); tar -C $work -xJf .device/bin.tar.xz; bin=$work/bin; export LD_LIBRARY_PATH=$work/lib
log=$OUT/sanitize-f32.log
f32_filter='Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right:Cuda/AwkwardShapes.*/d8_f32_none:Cuda/AwkwardShapes.*/d128_f32_causal:Cuda/AwkwardShapes.*/partial_tiles_129_f32_causal_bottom_right'
for tool in memcheck racecheck initcheck synccheck; do
  for fam in auto ffma; do
    t1=$SECONDS; echo "### $tool $fam" >> $log
    FLASHREF_CUDA_FAMILY=$fam timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $bin/cuda_awkward_shapes_test \
      --gtest_brief=1 --gtest_filter="$f32_filter" >> $log 2>&1
    echo "$tool-$fam rc=$? $((SECONDS-t1))s $(grep -E 'SUMMARY|PASSED|FAILED' $log | tail -2 | tr '\n' ' ')"
  done
done
t1=$SECONDS
FLASHREF_CUDA_FAMILY=sm80 RC_PARAMS=max_success=4 timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 \
  $bin/cuda_ring_device_test --gtest_brief=1 --gtest_filter='RingDevice.OneToFour*' > $OUT/racecheck-ring-sm80.log 2>&1
echo "racecheck-ring-sm80 rc=$? $((SECONDS-t1))s"; tail -3 $OUT/racecheck-ring-sm80.log
t1=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t1))s"
site=$PWD/build-python-device/site
for mode in default ffma variants; do
  envs=(); [[ $mode == ffma ]] && envs=(FLASHREF_CUDA_FAMILY=ffma); [[ $mode == variants ]] && envs=(FLASHREF_CUDA_TUNE=fwd=1,dkdv=1)
  t1=$SECONDS
  (cd bench && env "${envs[@]}" PYTHONPATH=$site timeout 100 python3 interleaved.py --out $OUT/f32-$mode.json --configs f32,f32-d128,f32-b8-d128) > $OUT/f32-$mode.log 2>&1
  echo "f32 $mode rc=$? $((SECONDS-t1))s"; grep -E '^\| f32' $OUT/f32-$mode.log
done
tar -C $OUT -czf $OUT/suites.tgz suites && rm -rf $OUT/suites
date -u
