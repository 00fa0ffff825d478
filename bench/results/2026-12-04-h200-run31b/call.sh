#!/usr/bin/env bash
# Run 31b (after run 31a): the fused backward's tuning variant fused90=3 (dK and dV stored by
# the TMA from K_j's and V_j's tiles, so that a persistent block's next K_j and V_j load under
# the stores) and the forward's fwd90=16 (the tile overlap only where the next tile's loads have
# landed): their suites and sanitizers, their bits against the default's, their times.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test cuda_large_problems_test" scripts/device-build; there: bash
# .device/call31b.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
R="env FLASHREF_CUDA_TUNE=fused90=3"
G2="env FLASHREF_CUDA_TUNE=grid90=2,fused90=3"
A="env FLASHREF_TEST_NONDETERMINISTIC=1 FLASHREF_CUDA_TUNE=fused90=3"
step awkward 60 $R $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-g2 60 $G2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 60 $A $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 $R RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-g2 60 $G2 RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $R $b/cuda_determinism_test --gtest_brief=1
step large 100 $R $b/cuda_large_problems_test --gtest_brief=1
step verify-128-br-gqa 60 $R $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-96-f16 60 $R $fr verify --backends cuda --dtype f16 --shape 2,8,777,1111,96 --mask causal
step verify-128-f32grad 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,8,1300,1100,128 --mask causal --grad-dtype f32
step verify-64-f32grad 60 $R $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,64 --mask causal --grad-dtype f32
step verify-64-nomask-mqa 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,8,1333,1500,64 --mask none --heads-kv 1
step verify-40 60 $R $fr verify --backends cuda --dtype bf16 --shape 3,4,300,257,40 --mask causal-bottom-right
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-g2-128 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-g2-64 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,64 --mask none
done
step racecheck-atomic-128 60 $R compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --mask causal --nondeterministic
step fuzz 20 $R $fr fuzz --backend cuda --seconds 10 --max-seq 1500 --seed $(date +%s)
F="env FLASHREF_CUDA_TUNE=fwd90=16"
step awkward-16 60 $F $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-16 60 $F RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step verify-16-br-gqa 60 $F $fr verify --backends cuda --dtype bf16 --shape 2,16,1000,400,64 --mask causal-bottom-right --heads-kv 4
step verify-16-f16 60 $F $fr verify --backends cuda --dtype f16 --shape 4,16,1000,1000,64 --mask causal
for tool in racecheck synccheck memcheck; do
  step $tool-16 90 $F compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,64 --mask causal-bottom-right
done
# Every output against the default's, bit for bit.
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(312)
for name, (Bn, H, Sq, Sk, D) in {"s64": (2, 16, 1000, 1000, 64), "l64": (1, 8, 2100, 2300, 64), "s128": (2, 8, 1000, 700, 128), "l128": (1, 8, 2100, 1900, 128), "d96": (2, 4, 600, 900, 96)}.items():
    for t, S in (("q", Sq), ("do", Sq), ("k", Sk), ("v", Sk)):
        np.save(f"{d}/{name}_{t}.npy", rng.standard_normal((Bn, H, S, D), dtype=np.float32))
PY
same=0; differ=0
for c in s64 l64 s128 l128 d96; do for m in causal-bottom-right none; do
  tunes="fused90=3"; [[ $c == s64 ]] && tunes="fused90=3 fwd90=16"
  for tune in "" $tunes; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask $m > /dev/null 2>>$OUT/bits.log || echo "run failed $tune $c $m" >> $OUT/bits.log
  done
  for tune in $tunes; do for f in $(cd $B/out-; ls *.npy); do if cmp -s $B/out-/$f $B/out-$tune/$f; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c $m $f" >> $OUT/bits.log; fi; done; done
done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/bits.log
one() {
  local pass=$1 tune=$2 label=$3; shift 3; [[ $tune == def ]] && tune=""
  local extra=""; [[ $pass == backward ]] && extra="--backward"
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json $extra "$@" 2>&1 | tr -d '\n')
  echo "bench $pass $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],4), round(x['min_ms'],4)) for x in r if x['pass']==sys.argv[2]])" "$r" $pass 2>/dev/null)"
}
for round in 1 2 3; do
  sides=(def fused90=3); ((round == 2)) && sides=(fused90=3 def)
  for s in "${sides[@]}"; do one backward $s s1024,128 --shape 32,16,1024,1024,128 --mask causal; done
  for s in "${sides[@]}"; do one backward $s s2048,128 --shape 16,16,2048,2048,128 --mask causal; done
  for s in "${sides[@]}"; do one backward $s s1024,64 --shape 32,16,1024,1024,64 --mask causal; done
  ((round == 3)) && continue
  for s in "${sides[@]}"; do one backward $s lb,128 --shape 1,16,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one backward $s s4096,128 --shape 8,16,4096,4096,128 --mask causal; done
  for s in "${sides[@]}"; do one backward $s lb,64 --shape 1,16,16384,16384,64 --mask causal; done
done
for round in 1 2; do
  case $round in 1) sides=(def fwd90=16 fwd90=15);; 2) sides=(fwd90=15 fwd90=16 def);; esac
  for s in "${sides[@]}"; do one forward $s s1024,64 --shape 32,16,1024,1024,64 --mask causal; done
  for s in "${sides[@]}"; do one forward $s s512,64 --shape 64,16,512,512,64 --mask causal; done
  for s in "${sides[@]}"; do one forward $s s1024nm,64 --shape 32,16,1024,1024,64 --mask none; done
done
date -u
