#!/usr/bin/env bash
# Run 33b: the sm90 16-bit forward's rows past the fold's range computed again after the main
# loop (kernels/sm90/fwd_rows_unfolded.cuh; run 33a's branch in the main loop cost 5-13%), and
# the 3xTF32 forward's truncated halves (fwd90=16 every operand's, 17 K's and V's, 18 V's) with
# the failures of run 33a's variants printed; the suites, the sanitizers, fuzzing, the SASS of
# the forward kernels, and the goal's table.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test
# cuda_backend_contract_test cuda_determinism_test" scripts/device-build; there: bash
# bench/results/2026-12-04-h200-run33b/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step family 30 $b/cuda_family_test --gtest_brief=1
step contract 30 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step large-scores 60 $b/cuda_awkward_shapes_test --gtest_filter='CudaLargeScores.*'
grep -A3 "Failure" $T | head -20
step awkward-f32-ffma 60 env FLASHREF_CUDA_FAMILY=ffma $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
for v in 16 17 18; do
  step awkward-f32-v$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='Cuda/*_f32_*:CudaFloat32Extremes.*'
  awk '/^### awkward-f32-v'$v'$/{on=1;next} /^### /{on=0} on && /FAILED|Failure|error \/ limit|exceeds|fail/' $T | head -30
  step properties-v$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
done
$b/cuda_properties_test --gtest_list_tests | head -20
step awkward-fused 60 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
for v in - 17; do
  tune=""; [[ $v != - ]] && tune=fwd90=$v
  V="env FLASHREF_CUDA_TUNE=$tune $fr verify --backends cuda --dtype f32"
  step verify-128-causal-$v 60 $V --shape 2,8,1024,1024,128 --mask causal
  step verify-128-sharp-$v 60 $V --shape 1,4,512,512,128 --mask causal --scale 1.0
  step verify-72-nomask-mqa-$v 60 $V --shape 2,4,700,900,72 --mask none --heads-kv 1
done
step verify-bf16-short 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1000,64 --mask causal
step verify-f16-128 60 $fr verify --backends cuda --dtype f16 --shape 1,8,3000,3000,128 --mask none
for tool in memcheck racecheck synccheck initcheck; do
  step $tool-f32-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype f32 --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
  step $tool-large-scores 150 compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaLargeScores.*'
done
step fuzz 15 $fr fuzz --backend cuda --seconds 10 --max-seq 2100 --seed $(date +%s)
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
cuobjdump --dump-sass $fr > $OUT/sass.txt 2>/dev/null
python3 - $OUT/sass.txt <<'PY' | tee $OUT/sass-summary.txt
import re, sys
name, counts = None, {}
for line in open(sys.argv[1]):
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        name = m.group(1); counts[name] = {"n": 0, "HGMMA": 0, "LDL": 0, "STL": 0, "MUFU.EX2": 0, "FFMA": 0, "FMUL": 0}
        continue
    m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if name and m:
        op = m.group(1); c = counts[name]; c["n"] += 1
        for k in ("HGMMA", "LDL", "STL", "MUFU.EX2", "FFMA", "FMUL"):
            if op.startswith(k): c[k] += 1
for n, c in counts.items():
    if "fwd_wgmma" in n or "fwd_3xtf32" in n:
        print(c, n[:150])
PY
one() {
  local fam=$1 tune=$2 label=$3; shift 3; [[ $tune == - ]] && tune=""
  local r=$(FLASHREF_CUDA_FAMILY=$fam FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype f32 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$fam $tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2; do
  sides=("auto -" "auto fwd90=16" "auto fwd90=17" "auto fwd90=18"); ((round == 2)) && sides=("auto fwd90=18" "auto fwd90=17" "auto fwd90=16" "auto -")
  for s in "${sides[@]}"; do one $s d128-causal --shape 1,1,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s d128-b8 --shape 8,1,4096,4096,128 --mask none; done
  for s in "${sides[@]}"; do one $s d64-causal --shape 1,1,16384,16384,64 --mask causal; done
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
lim=$((585 - SECONDS)); ((lim > 240)) && lim=240
(cd bench && FLASHREF_CUDA_TUNE=${FLASHREF_TABLE_TUNE:-} PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
date -u
