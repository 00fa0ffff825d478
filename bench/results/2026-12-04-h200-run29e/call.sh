#!/usr/bin/env bash
# Run 29e (after run 29d): fused90=3, d = 64's ordered kernel deferred with two writers on one
# dQ set. Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test" scripts/device-build; on the device: bash .device/call29e.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=3"
G2="env FLASHREF_CUDA_TUNE=grid90=2,fused90=3"
step awkward-s2 60 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-s2 60 $S2 RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
step determinism 60 env FLASHREF_CUDA_TUNE=fused90=3 $b/cuda_determinism_test --gtest_brief=1
step verify-g2-64 60 $G2 $fr verify --backends cuda --dtype bf16 --shape 2,8,1300,1300,64 --mask causal --heads-kv 2
for tool in racecheck synccheck; do
  step $tool-g2-64 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
done
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(295)
for name, (Bn, H, Hkv, Sq, Sk) in {"causal": (1, 4, 2, 2100, 2100), "nomask": (2, 2, 1, 1333, 1500)}.items():
    for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
        np.save(f"{d}/{name}_{t}.npy", rng.standard_normal((Bn, h, S, 64), dtype=np.float32))
PY
same=0; differ=0; tunes="fused90=3 fused90=3,grid90=3"
for c in causal nomask; do
  mk=causal; [[ $c == nomask ]] && mk=none
  for tune in "" $tunes; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask $mk > /dev/null 2>>$T || echo "run failed $tune $c" >> $T
  done
  for tune in $tunes; do for f in o lse dq dk dv; do if cmp -s $B/out-/$f.npy $B/out-$tune/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c $f" >> $T; fi; done; done
done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s"
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  ((SECONDS > 170)) && return
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for s in def fused90=3 fused90=3 def; do one $s lb,64 --shape 1,16,16384,16384,64 --mask causal; done
for s in def fused90=3; do one $s s1024,64 --shape 32,16,1024,1024,64 --mask causal; done
for s in fused90=3 def; do one $s s4096,64 --shape 8,16,4096,4096,64 --mask causal; done
for s in def fused90=3; do one $s s2048,64 --shape 16,16,2048,2048,64 --mask causal; done
for s in fused90=3 def; do one $s lb,64-nomask --shape 1,16,16384,16384,64 --mask none; done
date -u
