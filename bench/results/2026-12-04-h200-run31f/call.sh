#!/usr/bin/env bash
# Run 31f: d = 64's short forward tiles with four stages, with the overlap of tiles (fwd90=13)
# and without (fwd90=14), against the default (three stages; the overlap without a mask only)
# and fwd90=15 (three stages, the overlap with the mask too): their suites, bits, times.
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
  step properties-$v 60 $R RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
  step verify-$v-br-gqa 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,16,1000,400,64 --mask causal-bottom-right --heads-kv 4
  for tool in racecheck synccheck; do
    step $tool-$v 90 $R compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,64 --mask causal-bottom-right
  done
done
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(316)
for name, (Bn, H, Sq, Sk, D) in {"s64": (2, 16, 1000, 1000, 64), "r64": (3, 8, 1024, 700, 64)}.items():
    for t, S in (("q", Sq), ("do", Sq), ("k", Sk), ("v", Sk)):
        np.save(f"{d}/{name}_{t}.npy", rng.standard_normal((Bn, H, S, D), dtype=np.float32))
PY
same=0; differ=0
for c in s64 r64; do for m in causal-bottom-right none; do
  for tune in "" fwd90=13 fwd90=14; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask $m > /dev/null 2>>$OUT/bits.log || echo "run failed $tune $c $m" >> $OUT/bits.log
  done
  for tune in fwd90=13 fwd90=14; do for f in o.npy lse.npy; do if cmp -s $B/out-/$f $B/out-$tune/$f; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c $m $f" >> $OUT/bits.log; fi; done; done
done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/bits.log
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],4), round(x['min_ms'],4)) for x in r if x['pass']=='forward'])" "$r" 2>/dev/null)"
}
for round in 1 2 3; do
  case $round in 1) sides=(def fwd90=13 fwd90=14 fwd90=15);; 2) sides=(fwd90=14 fwd90=15 def fwd90=13);; 3) sides=(fwd90=15 def fwd90=13 fwd90=14);; esac
  for s in "${sides[@]}"; do one $s s1024,64 --shape 32,16,1024,1024,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s512,64 --shape 64,16,512,512,64 --mask causal; done
  ((round == 3)) && continue
  for s in "${sides[@]}"; do one $s s1024nm,64 --shape 32,16,1024,1024,64 --mask none; done
done
date -u
