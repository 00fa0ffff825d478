#!/usr/bin/env bash
# Run 26a: the persistent fused backward (FLASHREF_CUDA_TUNE=fused90=1; fused90=2 on two blocks,
# so that small problems run many tiles a block) beside the default fused kernels of this build
# and of run 25's build (base, .device/base-flashref.tar.xz): tests, sanitizers, the same bits,
# the SASS (HGMMA, no local memory), then base / default / persistent alternately on the
# backward problems.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
wb=$(mktemp -d); tar -C $wb -xJf .device/base-flashref.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref; frb=$wb/bin/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
P1="env FLASHREF_CUDA_TUNE=fused90=1"
P2="env FLASHREF_CUDA_TUNE=fused90=2"
step awkward-p2 100 $P2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-p2-atomic 100 $P2 FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-p2 100 $P2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-p1-atomic 60 $P1 FLASHREF_TEST_NONDETERMINISTIC=1 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism-p2 60 $P2 $b/cuda_determinism_test --gtest_brief=1
step large-p1 100 $P1 $b/cuda_large_problems_test --gtest_brief=1
step awkward-default 100 $b/cuda_awkward_shapes_test --gtest_brief=1
step verify-p1-1k 60 $P1 $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-p1-gqa-128 60 $P1 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-p1-sq-gt-sk 60 $P1 $fr verify --backends cuda --dtype f16 --shape 8,8,1500,1100,64 --mask causal-bottom-right
step verify-p1-nomask-128 60 $P1 $fr verify --backends cuda --dtype bf16 --shape 4,16,2000,2000,128 --mask none
step verify-p1-atomic-128 60 $P1 $fr verify --backends cuda --dtype bf16 --shape 4,16,1100,1300,128 --mask causal --nondeterministic
step fuzz-p2 30 $P2 $fr fuzz --backend cuda --seconds 12 --max-seq 1500 --seed $(date +%s)
for tool in memcheck racecheck synccheck initcheck; do
  step $tool-p2-64 60 $P2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
  step $tool-p2-128 60 $P2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
done
step racecheck-p2-atomic-128 60 $P2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1300,128 --mask causal-bottom-right --nondeterministic
echo "tests done $SECONDS s"
# The same bits: base's default, this build's default, persistent (ordered).
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(26)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 1333, 1333), "long": (1, 2, 1, 2100, 2100), "wide_k": (1, 2, 1, 1100, 2300), "sq_gt": (1, 2, 1, 1900, 1100)}.items():
    for Dh in (64, 128):
        p = f"{d}/{name}_d{Dh}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, Dh), dtype=np.float32))
PY
same=0; differ=0
for c in gqa long wide_k sq_gt; do for Dh in 64 128; do for dm in "bf16 none" "bf16 causal-bottom-right" "f16 causal"; do
  read -r dt mk <<<"$dm"
  for side in base def p1 p2; do
    tune=""; bin=$fr; [[ $side == base ]] && bin=$frb; [[ $side == p* ]] && tune=fused90=${side#p}
    rm -rf $B/out-$side; FLASHREF_CUDA_TUNE=$tune $bin run --backend cuda --out $B/out-$side --q $B/${c}_d${Dh}_q.npy --k $B/${c}_d${Dh}_k.npy --v $B/${c}_d${Dh}_v.npy --do $B/${c}_d${Dh}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $side $c $Dh $dm" >> $OUT/t/bits.log
  done
  for side in def p1 p2; do
  for f in o lse dq dk dv; do if cmp -s $B/out-base/$f.npy $B/out-$side/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $side $c d$Dh $dm $f" >> $OUT/t/bits.log; fi; done; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
cuobjdump --dump-sass $fr > $w/sass.txt 2>/dev/null
cuobjdump --dump-sass $frb > $w/sass-base.txt 2>/dev/null
for f in sass sass-base; do python3 - $w/$f.txt <<'PY' | tee $OUT/t/$f.txt
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
    if "bwd_dkdv" in k and "bfloat" in k: print(f"HGMMA {h:4d} local {l:3d} instr {n:6d} {k[:150]}")
PY
done
echo "sass done $SECONDS s"
j=$OUT/time/times.jsonl; : > $j
one() {  # side label args...
  local side=$1 label=$2; shift 2
  ((SECONDS > 560)) && return
  local tune="" bin=$fr; [[ $side == base ]] && bin=$frb; [[ $side == p1 ]] && tune=fused90=1
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $bin bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"side\": \"$side\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$side] $((SECONDS-t0))s"
}
for round in 1 2; do
for p in "s1024,128 --shape 32,16,1024,1024,128" "s1024,64 --shape 32,16,1024,1024,64" "s2048,128 --shape 16,16,2048,2048,128" "s4096,128 --shape 8,16,4096,4096,128" "s4096,64 --shape 8,16,4096,4096,64" "lb,128 --shape 1,16,16384,16384,128" "lb,64 --shape 1,16,16384,16384,64" "s1024-atomic,128 --shape 32,16,1024,1024,128 --nondeterministic" "s8192,128 --shape 4,16,8192,8192,128"; do
  read -r label args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  sides=(base def p1); ((round == 2)) && sides=(p1 def base)
  for s in "${sides[@]}"; do one "$s" "$label" $args; done
done; done
date -u
