#!/usr/bin/env bash
# Run 33d: the 3xTF32 forward's K and V halves clamped only in the 16-byte chunks that need it
# (fwd90=20: one FMNMX per value tests the chunk, against two for the clamp): the float32 suites
# on it and on the default (CudaFloat32Extremes now with a K value near float32's largest), its
# outputs against the default's bit for bit, its SASS beside the default's, and the times of
# both and of fwd90=14 (no clamp). Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_family_test cuda_backend_contract_test cuda_determinism_test" scripts/device-build;
# there: bash bench/results/2026-12-04-h200-run33d/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step awkward-f32-v20 60 env FLASHREF_CUDA_TUNE=fwd90=20 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='Cuda/*_f32_*:CudaFloat32Extremes.*'
step properties-v20 60 env FLASHREF_CUDA_TUNE=fwd90=20 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-f32-ffma 60 env FLASHREF_CUDA_FAMILY=ffma $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='*_f32_*'
grep -A3 "Failure" $T | head -20
step family 30 $b/cuda_family_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step verify-128-causal-20 60 env FLASHREF_CUDA_TUNE=fwd90=20 $fr verify --backends cuda --dtype f32 --shape 2,8,1024,1024,128 --mask causal
step memcheck-v20 90 env FLASHREF_CUDA_TUNE=fwd90=20 compute-sanitizer --tool memcheck --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaFloat32Extremes.*'
step racecheck-v20 120 env FLASHREF_CUDA_TUNE=fwd90=20 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype f32 --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
d=$(mktemp -d)
python3 - $d <<'PY'
import numpy as np, sys
rng = np.random.default_rng(7)
for dd in (64, 128):
    for name, scale in (("normal", 1.0), ("wide", 1e30)):
        x = {n: (rng.standard_normal((1, 4, 700, dd)) * (scale if n != "v" else 1.0)).astype(np.float32) for n in "qkv"}
        if name == "wide":  # values within 2^-12 of float32's largest, where the rounding carries
            x["v"][0, 1, 5, 3] = 3.4027e38; x["v"][0, 2, 9, 0] = -3.40281e38
            x["q"][0, 3, 100, 7] = 3.4027e38; x["k"][0, 3, :, 7] = 1e-38
            x["k"][0, 0, 300, 2] = -3.4027e38; x["q"][0, 0, :, 2] = 1e-38
        for n, a in x.items(): np.save(f"{sys.argv[1]}/{name}{dd}_{n}.npy", a)
PY
for dd in 64 128; do for name in normal wide; do
  for v in - 20; do
    tune=""; [[ $v != - ]] && tune=fwd90=$v
    FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --q $d/${name}${dd}_q.npy --k $d/${name}${dd}_k.npy --v $d/${name}${dd}_v.npy --mask causal --out $d/out-$name$dd-$v > /dev/null 2>&1 || echo "run $name$dd $v failed"
  done
  for f in o lse; do cmp -s $d/out-$name$dd--/$f.npy $d/out-$name$dd-20/$f.npy && echo "bits $name d=$dd $f: equal" || echo "bits $name d=$dd $f: DIFFER"; done
done; done
cuobjdump --dump-sass $fr > $OUT/sass.txt 2>/dev/null
python3 - $OUT/sass.txt <<'PY' | tee $OUT/sass-summary.txt
import re, sys
name, counts = None, {}
for line in open(sys.argv[1]):
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        name = m.group(1); counts[name] = {}
        continue
    m = re.match(r"\s+/\*[0-9a-f]{4,6}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
    if name and m:
        c = counts[name]; op = m.group(1); c[op] = c.get(op, 0) + 1; c["all"] = c.get("all", 0) + 1
for n, c in counts.items():
    if "fwd_3xtf32" in n:
        keys = ("all", "HGMMA", "LDL", "STL", "F2F", "FMNMX", "IADD3", "LOP3", "FADD")
        print({k: c.get(k, 0) for k in keys}, n[60:170])
PY
one() {
  local fam=$1 tune=$2 label=$3; shift 3; [[ $tune == - ]] && tune=""
  local r=$(FLASHREF_CUDA_FAMILY=$fam FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype f32 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$fam $tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2; do
  sides=("auto -" "auto fwd90=20" "auto fwd90=14"); ((round == 2)) && sides=("auto fwd90=14" "auto fwd90=20" "auto -")
  for s in "${sides[@]}"; do one $s d128-causal --shape 1,1,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s d128-b8 --shape 8,1,4096,4096,128 --mask none; done
  for s in "${sides[@]}"; do one $s d64-causal --shape 1,1,16384,16384,64 --mask causal; done
done
date -u
