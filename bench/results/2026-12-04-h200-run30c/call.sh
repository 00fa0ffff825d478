#!/usr/bin/env bash
# Run 30c (after run 30b): the forward's tuning variants fwd90=13 (the producer hands each
# tile's coordinates to the consumers with Q) and fwd90=14 (the same with two Q buffers, Q a
# tile ahead; d = 64). Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test
# cuda_properties_test cuda_determinism_test" scripts/device-build; there: bash
# .device/call30c.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
for v in 13 14; do
  R="env FLASHREF_CUDA_TUNE=fwd90=$v"
  step awkward-$v 60 $R $b/cuda_awkward_shapes_test --gtest_brief=1
  step properties-$v 60 $R RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
  step determinism-$v 60 $R $b/cuda_determinism_test --gtest_brief=1
  step verify-$v-64-short-br 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,16,1000,400,64 --mask causal-bottom-right --heads-kv 4
  step verify-$v-64-short 60 $R $fr verify --backends cuda --dtype f16 --shape 4,16,1000,1000,64 --mask causal
  step verify-$v-64-long-br 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,8,2100,1500,64 --mask causal-bottom-right
  step verify-$v-64-nomask 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,8,1500,1333,64 --mask none
  step verify-$v-128 60 $R $fr verify --backends cuda --dtype bf16 --shape 4,8,1000,900,128 --mask causal-bottom-right --heads-kv 2
  for tool in racecheck synccheck memcheck; do
    step $tool-$v-64 90 $R compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,64 --mask causal-bottom-right
  done
done
step racecheck-13-128 90 env FLASHREF_CUDA_TUNE=fwd90=13 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,128 --mask causal-bottom-right
# O and L against the default's, bit for bit.
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(303)
for name, (Bn, H, Sq, Sk, D) in {"s64": (2, 16, 1000, 1000, 64), "l64": (1, 16, 2100, 2300, 64), "s128": (2, 8, 1000, 700, 128)}.items():
    for t, S in (("q", Sq), ("do", Sq), ("k", Sk), ("v", Sk)):
        np.save(f"{d}/{name}_{t}.npy", rng.standard_normal((Bn, H, S, D), dtype=np.float32))
PY
same=0; differ=0
for c in s64 l64 s128; do
  tunes="fwd90=13 fwd90=14"; [[ $c == s128 ]] && tunes="fwd90=13"
  for tune in "" $tunes; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask causal-bottom-right > /dev/null 2>>$OUT/bits.log || echo "run failed $tune $c" >> $OUT/bits.log
  done
  for tune in $tunes; do for f in o lse; do if cmp -s $B/out-/$f.npy $B/out-$tune/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c $f" >> $OUT/bits.log; fi; done; done
done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/bits.log
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],4), round(x['min_ms'],4)) for x in r if x['pass']=='forward'])" "$r" 2>/dev/null)"
}
for round in 1 2 3; do
  case $round in 1) sides=(def fwd90=13 fwd90=14);; 2) sides=(fwd90=14 def fwd90=13);; 3) sides=(fwd90=13 fwd90=14 def);; esac
  for s in "${sides[@]}"; do one $s s1024,64 --shape 32,16,1024,1024,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s2048,64 --shape 16,16,2048,2048,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s512,64 --shape 64,16,512,512,64 --mask causal; done
  for s in "${sides[@]}"; do [[ $s == fwd90=14 ]] && continue; one $s s1024,128 --shape 32,16,1024,1024,128 --mask causal; done
  for s in "${sides[@]}"; do one $s lb,64 --shape 1,16,16384,16384,64 --mask causal; done
done
date -u
