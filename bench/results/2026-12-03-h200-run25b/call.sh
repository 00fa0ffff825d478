#!/usr/bin/env bash
# Run 25b: exact float32 as 3xTF32 with each mma step summed from zero (commit after 2bf148e):
# the suites (3xTF32 under FLASHREF_CUDA_FAMILY=3xtf32 on every float32 case, ffma the default),
# the sanitizers on its float32 cases, racecheck on the ring's kernels alone, then the float32
# problems beside the memory-efficient kernel in alternation (ffma, 3xTF32) and the CLI's
# timings of the d = 128 tile variants.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
t0=$SECONDS
OUT=$OUT/suites FLASHREF_DEVICE_QUICK=1 bash scripts/device-run tests > /dev/null 2>&1
echo "suites rc=$? $((SECONDS-t0))s"; grep -vE ' ok ' $OUT/suites/summary.txt | head -12
grep -E '3xtf32|awkward_shapes_test|properties_test |fuzz' $OUT/suites/summary.txt
grep -E 'FAILED  \]|> limit' $OUT/suites/tests.log | sort | uniq -c | head -20
work=$(mktemp -d); tar -C $work -xJf .device/bin.tar.xz; bin=$work/bin; export LD_LIBRARY_PATH=$work/lib
log=$OUT/sanitize-f32.log
f32_filter='Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right:Cuda/AwkwardShapes.*/d8_f32_none:Cuda/AwkwardShapes.*/d128_f32_causal:Cuda/AwkwardShapes.*/partial_tiles_129_f32_causal_bottom_right'
for tool in memcheck racecheck initcheck synccheck; do
  t1=$SECONDS; echo "### $tool" >> $log
  FLASHREF_CUDA_FAMILY=3xtf32 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $bin/cuda_awkward_shapes_test \
    --gtest_brief=1 --gtest_filter="$f32_filter" >> $log 2>&1
  echo "$tool-3xtf32 rc=$? $((SECONDS-t1))s $(grep -E 'SUMMARY|PASSED|FAILED' $log | tail -2 | tr '\n' ' ')"
done
t1=$SECONDS
RC_PARAMS=max_success=8 timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
  $bin/cuda_ring_device_test --gtest_brief=1 --gtest_filter='RingDeviceOps.*' > $OUT/racecheck-ring.log 2>&1
echo "racecheck-ring (ops) rc=$? $((SECONDS-t1))s $(tail -1 $OUT/racecheck-ring.log)"
t1=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t1))s"
site=$PWD/build-python-device/site
for fam in auto 3xtf32; do
  t1=$SECONDS
  (cd bench && FLASHREF_CUDA_FAMILY=$fam PYTHONPATH=$site timeout 100 python3 interleaved.py --out $OUT/f32-$fam.json --configs f32,f32-d128,f32-b8-d128) > $OUT/f32-$fam.log 2>&1
  echo "f32 $fam rc=$? $((SECONDS-t1))s"; grep -E '^\| f32' $OUT/f32-$fam.log
done
jl=$OUT/f32-cli.jsonl; : > $jl
for round in 1; do
  for mode in "auto:" "3xtf32:" "3xtf32:fwd=1,dkdv=1"; do
    for shape in "1,1,16384,16384,128 --mask causal" "8,1,4096,4096,128 --mask none"; do
      fam=${mode%%:*} tune=${mode#*:}
      j=$(FLASHREF_CUDA_FAMILY=$fam FLASHREF_CUDA_TUNE=$tune timeout 120 $bin/flashref bench --backends cuda --reps 20 --warmup 3 --json \
        --shape $shape --dtype f32 --backward 2>&1)
      echo "{\"family\": \"$fam\", \"tune\": \"$tune\", \"shape\": \"$shape\", \"round\": $round, \"rows\": $j}" >> $jl
    done
  done
done
python3 - $jl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception as e: print('bad line', l[:200]); continue
    ms={x['pass']:x['median_ms'] for x in r['rows']} if isinstance(r['rows'],list) else r['rows']
    print(r['round'], r['family'], r['tune'] or '-', r['shape'], ms)
PY
tar -C $OUT -czf $OUT/suites.tgz suites && rm -rf $OUT/suites
date -u
