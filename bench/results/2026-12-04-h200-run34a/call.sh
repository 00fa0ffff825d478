#!/usr/bin/env bash
# Run 34a: exact float32's backward on 3xTF32 wgmma (kernels/sm90/bwd_dkdv_3xtf32.cuh,
# bwd_dq_3xtf32.cuh), its first GPU run, asked for with FLASHREF_CUDA_TUNE=f32bwd=6 (not the
# default until this run has passed): the suites' float32 cases on it (ffma the control; each
# pass alone, f32bwd=7 and 8; the dK/dV pass's group variants f32bwd=2..5), `verify` under the
# exact rule, the four sanitizers, fuzzing; then the backward against the default (ffma's, "-"),
# each pass alone and the variants (`flashref bench --backward`), and the float32 rows of the
# goal's table against the memory-efficient kernel. Here: FLASHREF_DEVICE_TESTS=
# "cuda_awkward_shapes_test cuda_properties_test cuda_family_test cuda_determinism_test"
# scripts/device-build; there: bash bench/results/2026-12-04-h200-run34a/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step family 30 $b/cuda_family_test --gtest_brief=1
export FLASHREF_CUDA_TUNE=f32bwd=6  # the suites on the new pass

step awkward 90 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-ffma 90 env FLASHREF_CUDA_FAMILY=ffma $b/cuda_awkward_shapes_test --gtest_brief=1
for v in 7 8 2 3 4 5; do
  step awkward-f32bwd$v 90 env FLASHREF_CUDA_TUNE=f32bwd=$v $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*f32*:*Float32*'
done
step properties 90 env RC_PARAMS=max_success=80 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1

V="$fr verify --backends cuda --dtype f32"
step verify-128-causal 60 $V --shape 2,8,1024,1024,128 --mask causal
step verify-128-br-gqa 60 $V --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step verify-128-long 90 $V --shape 1,2,4000,4000,128 --mask causal
step verify-72-nomask-mqa 60 $V --shape 2,4,700,900,72 --mask none --heads-kv 1
step verify-64-causal 60 $V --shape 2,8,2048,2048,64 --mask causal
step verify-40-br 60 $V --shape 1,3,130,70,40 --mask causal-bottom-right
step verify-128-sharp 60 $V --shape 1,4,512,512,128 --mask causal --scale 1.0
step verify-128-negscale 60 $V --shape 1,4,700,600,128 --mask none --scale -0.09
step verify-128-s1 60 $V --shape 2,2,300,1,128 --mask none
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
  step $tool-64 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,300,500,64 --mask none
done
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
# The new kernels' SASS: HGMMA present, no local-memory traffic (LDL/STL).
OUT=$OUT bash scripts/device-run sass > $OUT/device-run-sass.log 2>&1
grep -E 'bwd_(dq|dkdv)_3xtf32' $OUT/sass.txt | sed 's/  */ /g' | cut -c1-220
unset FLASHREF_CUDA_TUNE
one() {
  local tune=$1 label=$2; shift 2
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype f32 --backward --reps 15 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2; do
  tunes=(- f32bwd=6 f32bwd=7 f32bwd=8 f32bwd=2 f32bwd=3 f32bwd=4 f32bwd=5); ((round == 2)) && tunes=(f32bwd=5 f32bwd=4 f32bwd=3 f32bwd=2 f32bwd=8 f32bwd=7 f32bwd=6 -)
  for s in "${tunes[@]}"; do one $s d128-causal --shape 1,1,16384,16384,128 --mask causal; done
  for s in "${tunes[@]}"; do one $s d128-b8 --shape 8,1,4096,4096,128 --mask none; done
  for s in "${tunes[@]}"; do one $s d64-causal --shape 1,1,16384,16384,64 --mask causal; done
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
for tune in - f32bwd=6; do
  t0=$SECONDS
  (cd bench && FLASHREF_CUDA_TUNE=$tune PYTHONPATH=$site timeout 100 python3 interleaved.py --out $OUT/interleaved-$tune.json --configs f32,f32-d128,f32-b8-d128) > $OUT/interleaved-$tune.log 2>&1
  echo "interleaved [$tune] rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved-$tune.log | tail -4
done
date -u
