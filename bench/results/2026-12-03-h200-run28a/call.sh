#!/usr/bin/env bash
# Run 28a (planned after run 27d). Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test
# cuda_properties_test cuda_determinism_test cuda_large_problems_test" scripts/device-build,
# then cp dev/sm90/call28a.sh .device/; on the device: bash .device/call28a.sh, carrying .device.
# What it runs: fused90=2 (two stages, two dQ sets, a writer thread for each) on two blocks
# through the suites and the sanitizers, against the default's bits; then three rounds, order
# rotating, default / fused90=2 / atomic; then Nsight Compute at free clocks on S = 1k d = 128.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=2"
R="env FLASHREF_CUDA_TUNE=fused90=2"
ND=FLASHREF_TEST_NONDETERMINISTIC=1
step awkward-s2 100 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2-atomic 100 $S2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-s2 100 $S2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism-r 60 $R $b/cuda_determinism_test --gtest_brief=1
step large-r 100 $R $b/cuda_large_problems_test --gtest_brief=1
step verify-r-gqa-128 60 $R $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-r-f32grad 60 $R $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,128 --mask causal --grad-dtype f32
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
tunes="fused90=2 fused90=2,grid90=3"
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
for side in def fused90=2 atomic; do
  a=""; t=$side; [[ $side == atomic ]] && { a=--nondeterministic; t=def; }; [[ $t == def ]] && t=""
  FLASHREF_CUDA_TUNE=$t timeout 40 ncu --clock-control none --kernel-name regex:bwd_dkdv --launch-count 1 --section SpeedOfLight $fr bench --backends cuda --dtype bf16 --reps 1 --warmup 0 --backward --shape 32,16,1024,1024,128 --mask causal $a > $OUT/t/ncu-free-$side.txt 2>&1
  echo "ncu $side: $(grep -E 'SM Frequency|Elapsed Cycles|Duration' $OUT/t/ncu-free-$side.txt | tr -s ' ' | tr '\n' ';')"
done
for round in 1 2 3; do
for p in "s1024,128 def,2,atomic --shape 32,16,1024,1024,128" "s1024,64 def,2,atomic --shape 32,16,1024,1024,64" "s2048,128 def,2 --shape 16,16,2048,2048,128" "s4096,128 def,2 --shape 8,16,4096,4096,128" "lb,128 def,2,atomic --shape 1,16,16384,16384,128" "lb,64 def,2 --shape 1,16,16384,16384,64"; do
  read -r label list args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  sides=(); for v in ${list//,/ }; do case $v in def) sides+=(def);; atomic) sides+=(atomic);; *) sides+=(fused90=$v);; esac; done
  for ((r = 0; r < round - 1; ++r)); do sides=("${sides[@]:1}" "${sides[0]}"); done
  for s in "${sides[@]}"; do if [[ $s == atomic ]]; then one def "$label-atomic" $args --nondeterministic; else one "$s" "$label" $args; fi; done
done; done
date -u
