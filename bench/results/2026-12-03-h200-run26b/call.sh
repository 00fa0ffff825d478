#!/usr/bin/env bash
# Run 26b: the persistent fused backward as the default, and its variant with dK and dV written
# from the registers (FLASHREF_CUDA_TUNE=fused90=2): the suites with the persistent grid on two
# blocks (grid90=2: many key tiles a block), the sanitizers, the same bits as run 25's build
# (base), the SASS, then base / default / from-registers alternately on the backward problems.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
wb=$(mktemp -d); tar -C $wb -xJf .device/base-flashref.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref; frb=$wb/bin/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
G2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2"
R2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=2"
R="env FLASHREF_CUDA_TUNE=fused90=2"
ND=FLASHREF_TEST_NONDETERMINISTIC=1
step awkward-default 100 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-g2 100 $G2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-g2-atomic 100 $G2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-g2 100 $G2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism-default 60 $b/cuda_determinism_test --gtest_brief=1
step large-default 100 $b/cuda_large_problems_test --gtest_brief=1
step awkward-r2 100 $R2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-r2-atomic 100 $R2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-r2 100 $R2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism-r 60 $R $b/cuda_determinism_test --gtest_brief=1
step verify-default-gqa-128 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-r-1k 60 $R $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-r-f32grad 60 $R $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,128 --mask causal --grad-dtype f32
step fuzz-g2 25 $G2 $fr fuzz --backend cuda --seconds 10 --max-seq 1500 --seed $(date +%s)
for tool in memcheck racecheck synccheck initcheck; do
  step $tool-g2-128 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-r2-64 60 $R2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
done
step racecheck-r2-128 60 $R2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
echo "tests done $SECONDS s"
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
for c in gqa long sq_gt; do for Dh in 64 128; do for dm in "bf16 none" "f16 causal"; do
  read -r dt mk <<<"$dm"
  for side in base def r; do
    tune=""; bin=$fr; [[ $side == base ]] && bin=$frb; [[ $side == r ]] && tune=fused90=2
    rm -rf $B/out-$side; FLASHREF_CUDA_TUNE=$tune $bin run --backend cuda --out $B/out-$side --q $B/${c}_d${Dh}_q.npy --k $B/${c}_d${Dh}_k.npy --v $B/${c}_d${Dh}_v.npy --do $B/${c}_d${Dh}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $side $c $Dh $dm" >> $OUT/t/bits.log
  done
  for side in def r; do
  for f in o lse dq dk dv; do if cmp -s $B/out-base/$f.npy $B/out-$side/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $side $c d$Dh $dm $f" >> $OUT/t/bits.log; fi; done; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
cuobjdump --dump-sass $fr > $w/sass.txt 2>/dev/null
python3 - $w/sass.txt <<'PY' | tee $OUT/t/sass.txt
import sys, re
cur = None; stats = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"Function : (\S+)", line)
    if m: cur = m.group(1); stats[cur] = [0, 0, 0]; continue
    if cur and "wgmma" in cur:
        if "HGMMA" in line: stats[cur][0] += 1
        if re.search(r"\b(LDL|STL)\b", line): stats[cur][1] += 1
        if re.search(r"/\*[0-9a-f]{4}\*/", line): stats[cur][2] += 1
for k, (h, l, n) in stats.items():
    if "bfloat" in k: print(f"HGMMA {h:4d} local {l:3d} instr {n:6d} {k[:150]}")
PY
echo "sass done $SECONDS s"
j=$OUT/time/times.jsonl; : > $j
one() {  # side label args...
  local side=$1 label=$2; shift 2
  ((SECONDS > 565)) && return
  local tune="" bin=$fr; [[ $side == base ]] && bin=$frb; [[ $side == r ]] && tune=fused90=2
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $bin bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"side\": \"$side\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$side] $((SECONDS-t0))s"
}
for round in 1 2; do
for p in "s1024,128 --shape 32,16,1024,1024,128" "s1024,64 --shape 32,16,1024,1024,64" "s4096,128 --shape 8,16,4096,4096,128" "lb,128 --shape 1,16,16384,16384,128" "s2048,128 --shape 16,16,2048,2048,128" "s4096,64 --shape 8,16,4096,4096,64" "lb,64 --shape 1,16,16384,16384,64" "s1024-atomic,128 --shape 32,16,1024,1024,128 --nondeterministic"; do
  read -r label args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  sides=(base def r); ((round == 2)) && sides=(r def base)
  for s in "${sides[@]}"; do one "$s" "$label" $args; done
done; done
date -u
