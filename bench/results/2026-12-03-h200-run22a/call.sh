#!/usr/bin/env bash
# Run 22a: the deferred dQ (FLASHREF_CUDA_TUNE=fused90=1, BwdDqDeferred; fused90=2 at d = 128
# with P^T under dP^T's product too) against the default fused kernels in one tuning build: its tests (awkward shapes, properties, determinism, large
# problems, verify, fuzzing, ordered and atomic), the sanitizers on it, the same bits as the
# default (the ordered kernel adds the same products in the same order), the SASS (HGMMA, no
# local memory), then default and deferred alternately on the backward problems.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
D="env FLASHREF_CUDA_TUNE=fused90=1"
step awkward-deferred 100 $D $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-deferred-atomic 100 $D FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-deferred 100 $D $b/cuda_properties_test --gtest_brief=1
step properties-deferred-atomic 60 $D FLASHREF_TEST_NONDETERMINISTIC=1 RC_PARAMS=max_success=80 $b/cuda_properties_test --gtest_brief=1
step determinism-deferred 60 $D $b/cuda_determinism_test --gtest_brief=1
D2="env FLASHREF_CUDA_TUNE=fused90=2"
step awkward-deferred2 100 $D2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-deferred2-atomic 100 $D2 FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-deferred2 100 $D2 $b/cuda_properties_test --gtest_brief=1
step determinism-deferred2 60 $D2 $b/cuda_determinism_test --gtest_brief=1
step racecheck2-128 60 $D2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,128 --heads-kv 2 --mask causal
step synccheck2-128 60 $D2 compute-sanitizer --tool synccheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,128 --heads-kv 2 --mask causal
step large-deferred 100 $D $b/cuda_large_problems_test --gtest_brief=1
step verify-1k 60 $D $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-gqa-128 60 $D $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-sq-gt-sk 60 $D $fr verify --backends cuda --dtype f16 --shape 2,4,1500,1100,64 --mask causal-bottom-right
step verify-nomask-128 60 $D $fr verify --backends cuda --dtype bf16 --shape 1,4,2000,2000,128 --mask none
step fuzz-cuda 40 $D $fr fuzz --backend cuda --seconds 15 --max-seq 1500 --seed $(date +%s)
for tool in memcheck racecheck synccheck; do
  step $tool-64 60 $D compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1100,64 --mask causal
  step $tool-128 60 $D compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,128 --heads-kv 2 --mask causal
done
step racecheck-atomic-128 60 $D compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1300,128 --mask causal-bottom-right --nondeterministic
# The same bits as the default fused kernel (ordered), and the SASS.
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(12)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 1333, 1333), "long": (1, 2, 1, 2100, 2100), "wide_k": (1, 2, 1, 1100, 2300), "sq_gt": (1, 2, 1, 1900, 1100)}.items():
    for Dh in (64, 128):
        p = f"{d}/{name}_d{Dh}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, Dh), dtype=np.float32))
PY
same=0; differ=0
for c in gqa long wide_k sq_gt; do for Dh in 64 128; do for dm in "bf16 none" "bf16 causal-bottom-right" "f16 causal"; do
  read -r dt mk <<<"$dm"
  sides="old new1"; ((Dh == 128)) && sides="old new1 new2"
  for side in $sides; do
    tune=""; [[ $side == new* ]] && tune=fused90=${side#new}
    rm -rf $B/out-$side; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$side --q $B/${c}_d${Dh}_q.npy --k $B/${c}_d${Dh}_k.npy --v $B/${c}_d${Dh}_v.npy --do $B/${c}_d${Dh}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $side $c $Dh $dm" >> $OUT/t/bits.log
  done
  for side in $sides; do [[ $side == old ]] && continue
  for f in o lse dq dk dv; do if cmp -s $B/out-old/$f.npy $B/out-$side/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $side $c d$Dh $dm $f" >> $OUT/t/bits.log; fi; done; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
cuobjdump --dump-sass $b/flashref > $w/sass.txt 2>/dev/null
python3 - $w/sass.txt <<'PY' | tee $OUT/t/sass.txt
import sys, re
cur = None; stats = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"Function : (\S+)", line)
    if m: cur = m.group(1); stats[cur] = [0, 0, 0]; continue
    if cur and "bwd_dkdv" in cur:
        if "HGMMA" in line: stats[cur][0] += 1
        if re.search(r"\b(LDL|STL)\b", line): stats[cur][1] += 1
        if re.search(r"/\*[0-9a-f]{4}\*/", line): stats[cur][2] += 1
for k, (h, l, n) in stats.items():
    if "bwd_dkdv" in k: print(f"HGMMA {h:4d} local {l:3d} instr {n:6d} {k[:150]}")
PY
j=$OUT/time/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2
  ((SECONDS > 545)) && return
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s"
}
for round in 1 2 3; do
for p in "lb,128 --shape 1,16,16384,16384,128" "lb,64 --shape 1,16,16384,16384,64" "lb-nomask,64 --shape 1,16,16384,16384,64 --mask none" "s16k-b2,128 --shape 2,16,16384,16384,128" "s4096,64 --shape 8,16,4096,4096,64" "s4096,128 --shape 8,16,4096,4096,128" "s1024,64 --shape 32,16,1024,1024,64" "s1024,128 --shape 32,16,1024,1024,128" "lb-atomic,128 --shape 1,16,16384,16384,128 --nondeterministic" "lb-atomic,64 --shape 1,16,16384,16384,64 --nondeterministic"; do
  read -r label args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  cands=("" fused90=1); [[ $label == *,128 ]] && cands+=(fused90=2)
  ((round == 2)) && cands=("${cands[@]:1}" "")
  for c in "${cands[@]}"; do one "$c" "$label" $args; done
done; done
date -u
