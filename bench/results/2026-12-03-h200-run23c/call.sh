#!/usr/bin/env bash
# Run 23c: the forward whose epilogue stores O by the TMA (FLASHREF_CUDA_TUNE=fwd90=12) against
# the default, one tuning build: its tests (awkward shapes, properties, large problems, verify,
# fuzzing), the sanitizers on it, the same bits as the default (the same arithmetic, another
# way out), the SASS (HGMMA, no local memory); default and variant alternately on the forward
# problems.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
D="env FLASHREF_CUDA_TUNE=fwd90=12"
step awkward-tma 100 $D $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-tma 100 $D $b/cuda_properties_test --gtest_brief=1
step large-tma 60 $D $b/cuda_large_problems_test --gtest_brief=1
step verify-1k-64 60 $D $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-gqa-128 60 $D $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-sq-gt-sk 60 $D $fr verify --backends cuda --dtype f16 --shape 2,4,1500,1100,128 --mask causal-bottom-right
step verify-d96 60 $D $fr verify --backends cuda --dtype bf16 --shape 2,4,700,900,96 --mask none
step fuzz-cuda 30 $D $fr fuzz --backend cuda --seconds 12 --max-seq 1500 --seed $(date +%s)
for tool in memcheck racecheck synccheck; do
  step $tool-64 60 $D compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 3,4,1000,1000,64 --mask causal
  step $tool-128 60 $D compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,128 --heads-kv 2 --mask causal
done
# The same bits as the default.
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(23)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 1333, 1333), "short": (3, 2, 2, 1000, 1000), "wide_k": (1, 2, 1, 700, 2300), "sq_gt": (1, 2, 1, 1900, 1100)}.items():
    for Dh in (64, 128):
        p = f"{d}/{name}_d{Dh}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, Dh), dtype=np.float32))
PY
same=0; differ=0
for c in gqa short wide_k sq_gt; do for Dh in 64 128; do for dm in "bf16 none" "bf16 causal-bottom-right" "f16 causal"; do
  read -r dt mk <<<"$dm"
  for side in old new; do
    tune=""; [[ $side == new ]] && tune=fwd90=12
    rm -rf $B/out-$side; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$side --q $B/${c}_d${Dh}_q.npy --k $B/${c}_d${Dh}_k.npy --v $B/${c}_d${Dh}_v.npy --do $B/${c}_d${Dh}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $side $c $Dh $dm" >> $OUT/t/bits.log
  done
  for f in o lse dq dk dv; do if cmp -s $B/out-old/$f.npy $B/out-new/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $c d$Dh $dm $f" >> $OUT/t/bits.log; fi; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
cuobjdump --dump-sass $b/flashref > $w/sass.txt 2>/dev/null
python3 - $w/sass.txt <<'PY' | tee $OUT/t/sass.txt
import sys, re
cur = None; stats = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"Function : (\S+)", line)
    if m: cur = m.group(1); stats[cur] = [0, 0, 0, 0]; continue
    if cur and "fwd_wgmma" in cur:
        if "HGMMA" in line: stats[cur][0] += 1
        if re.search(r"\b(LDL|STL)\b", line): stats[cur][1] += 1
        if re.search(r"/\*[0-9a-f]{4}\*/", line): stats[cur][2] += 1
        if "STSM" in line or "UTMASTG" in line: stats[cur][3] += 1
for k, (h, l, n, st) in stats.items():
    if "fwd_wgmma" in k: print(f"HGMMA {h:4d} local {l:3d} instr {n:6d} STSM/UTMASTG {st:3d} {k[:150]}")
PY
j=$OUT/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2
  ((SECONDS > 400)) && return
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
}
for round in 1 2; do
for p in "s1024,128 --shape 32,16,1024,1024,128" "s2048,128 --shape 16,16,2048,2048,128" "s4096,128 --shape 8,16,4096,4096,128" "s8192,128 --shape 4,16,8192,8192,128" "lb,128 --shape 1,16,16384,16384,128" "s32k,128 --shape 1,16,32768,32768,128" "s1024,64 --shape 32,16,1024,1024,64" "lb-nomask,128 --shape 1,16,16384,16384,128 --mask none"; do
  read -r label args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  cands=("" fwd90=12); ((round == 2)) && cands=(fwd90=12 "")
  for c in "${cands[@]}"; do one "$c" "$label" $args; done
done; done
python3 - $j <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    for row in r["rows"]:
        if row.get("pass") == "forward": t[(r["label"], r["tune"] or "default")].append(row["median_ms"])
for k in sorted(t): print(f"{k[0]:16s} {k[1]:10s} " + " ".join(f"{x:.3f}" for x in t[k]))
PY
date -u
