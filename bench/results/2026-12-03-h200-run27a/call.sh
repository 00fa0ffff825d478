#!/usr/bin/env bash
# Run 27a: two sets of dQ tiles (fused90=2: two stages, two sets) and two stages alone
# (fused90=3) in the persistent fused backward: the suites on two blocks (grid90=2), the
# sanitizers, the same bits as the default, the SASS, then default / fused90=2 / fused90=3
# alternately on the backward problems; and run 26d's check (no mask: default against a block
# per key tile, fused90=1).
set -u
MODES="${*:-tests san time}"
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
want() { [[ " $MODES " == *" $1 "* ]]; }
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=2"
S3="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=3"
S4="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=4"
S5="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=5"
S6="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=6"
S7="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=7"
R="env FLASHREF_CUDA_TUNE=fused90=2"
ND=FLASHREF_TEST_NONDETERMINISTIC=1
if want tests; then
step awkward-s2 100 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2-atomic 100 $S2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s3 100 $S3 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s4 100 $S4 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s5 100 $S5 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s5-atomic 100 $S5 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-s5 100 $S5 RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
step awkward-s6 100 $S6 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s7 100 $S7 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s7-atomic 100 $S7 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-s7 100 $S7 RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
step verify-s7-f32grad 60 $S7 $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,128 --mask causal --grad-dtype f32
step verify-s6-72 60 $S6 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1000,72 --mask causal
step properties-s2 100 $S2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism-r 60 $R $b/cuda_determinism_test --gtest_brief=1
step large-r 100 $R $b/cuda_large_problems_test --gtest_brief=1
step verify-r-gqa-128 60 $R $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-r-f32grad 60 $R $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,128 --mask causal --grad-dtype f32
step verify-r-nomask-64 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,2000,64 --mask none
fi
if want san; then
for tool in racecheck synccheck; do
  step $tool-s7-128 60 $S7 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-s7-64 60 $S7 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
  step $tool-s6-128 60 $S6 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-s5-128 60 $S5 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
done
step memcheck-s7-128 60 $S7 compute-sanitizer --tool memcheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
step initcheck-s7-128 60 $S7 compute-sanitizer --tool initcheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
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
  for tune in "" fused90=2 fused90=3 fused90=4 fused90=5 fused90=6 fused90=7 fused90=7,grid90=3; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_d${Dh}_q.npy --k $B/${c}_d${Dh}_k.npy --v $B/${c}_d${Dh}_v.npy --do $B/${c}_d${Dh}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $tune $c $Dh $dm" >> $OUT/t/bits.log
  done
  for tune in fused90=2 fused90=3 fused90=4 fused90=5 fused90=6 fused90=7 fused90=7,grid90=3; do
  for f in o lse dq dk dv; do if cmp -s $B/out-/$f.npy $B/out-$tune/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c d$Dh $dm $f" >> $OUT/t/bits.log; fi; done; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
cuobjdump --dump-sass $fr > $w/sass.txt 2>/dev/null
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
    if "bfloat" in k: print(f"HGMMA {h:4d} local {l:3d} instr {n:6d} {k[:150]}")
PY
echo "sass done $SECONDS s"
fi
if want time; then
j=$OUT/time/times.jsonl; : > $j
one() {  # tune label args...
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  ((SECONDS > 575)) && return
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([round(x['median_ms'],3) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2; do
for p in "s1024,128 def,2,3,4,5,6,7 --shape 32,16,1024,1024,128" "s1024,64 def,2,3,4,6,7 --shape 32,16,1024,1024,64" "s4096,128 def,2,4,5,6,7 --shape 8,16,4096,4096,128" "lb,128 def,2,4,5,6,7 --shape 1,16,16384,16384,128" "lb,64 def,2,4,6,7 --shape 1,16,16384,16384,64" "nomask,64 def,1,4,6 --shape 1,16,16384,16384,64 --mask none" "s1024-atomic,128 def,4,6,7 --shape 32,16,1024,1024,128 --nondeterministic" "nomask,128 def,1,5,7 --shape 1,16,16384,16384,128 --mask none"; do
  read -r label list args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  sides=(); for v in ${list//,/ }; do [[ $v == def ]] && sides+=(def) || sides+=(fused90=$v); done
  ((round == 2)) && sides=($(printf '%s\n' "${sides[@]}" | tac))
  for s in "${sides[@]}"; do one "$s" "$label" $args; done
done; done
fi
date -u
