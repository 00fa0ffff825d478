#!/usr/bin/env bash
# Run 27b: fused90=2 (two stages, two dQ sets) under the sanitizers and against the default's
# bits; then three rounds, order rotating, on the problems where run 27a's variants moved.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=2"
for tool in racecheck synccheck; do
  step $tool-s2-128 60 $S2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-s2-64 60 $S2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
done
step memcheck-s2-128 60 $S2 compute-sanitizer --tool memcheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
step initcheck-s2-128 60 $S2 compute-sanitizer --tool initcheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
step fuzz-s2 25 $S2 $fr fuzz --backend cuda --seconds 12 --max-seq 1500 --seed $(date +%s)
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(27)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 1333, 1333), "long": (1, 2, 1, 2100, 2100), "sq_gt": (1, 2, 1, 1900, 1100)}.items():
    for Dh in (64, 128):
        p = f"{d}/{name}_d{Dh}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, Dh), dtype=np.float32))
PY
same=0; differ=0
tunes="fused90=1 fused90=2 fused90=2,grid90=3 fused90=4 fused90=7"
for c in gqa long sq_gt; do for Dh in 64 128; do for dm in "bf16 none" "f16 causal"; do
  read -r dt mk <<<"$dm"
  for tune in "" $tunes; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_d${Dh}_q.npy --k $B/${c}_d${Dh}_k.npy --v $B/${c}_d${Dh}_v.npy --do $B/${c}_d${Dh}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $tune $c $Dh $dm" >> $OUT/t/bits.log
  done
  for tune in $tunes; do
  for f in o lse dq dk dv; do if cmp -s $B/out-/$f.npy $B/out-$tune/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c d$Dh $dm $f" >> $OUT/t/bits.log; fi; done; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
j=$OUT/time/times.jsonl; : > $j
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  ((SECONDS > 560)) && return
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2 3; do
for p in "lb,128 def,2,4 --shape 1,16,16384,16384,128" "nomask,64 def,1,2 --shape 1,16,16384,16384,64 --mask none" "s2048,128 def,2 --shape 16,16,2048,2048,128" "nomask,128 def,2 --shape 1,16,16384,16384,128 --mask none" "lb,64 def,2,4 --shape 1,16,16384,16384,64" "s8192,128 def,2 --shape 4,16,8192,8192,128"; do
  read -r label list args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  sides=(); for v in ${list//,/ }; do [[ $v == def ]] && sides+=(def) || sides+=(fused90=$v); done
  for ((r = 0; r < round - 1; ++r)); do sides=("${sides[@]:1}" "${sides[0]}"); done
  for s in "${sides[@]}"; do one "$s" "$label" $args; done
done; done
date -u
