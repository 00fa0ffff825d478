#!/usr/bin/env bash
# Run 31a (after run 30d): the forward's tuning variant fwd90=15 (d = 64's short tiles, the
# next tile's first S issued with the last P~ V, its softmax under it) through the suites, its
# bits against the default's, its time against the default's; then the d = 128 backward's
# kernels at S = 1k and 2k, ours and cuDNN's, each timed alone by Nsight Compute.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test" scripts/device-build; there: bash .device/call31a.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
R="env FLASHREF_CUDA_TUNE=fwd90=15"
step awkward-15 60 $R $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-15 60 $R RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism-15 60 $R $b/cuda_determinism_test --gtest_brief=1
step verify-15-br-gqa 60 $R $fr verify --backends cuda --dtype bf16 --shape 2,16,1000,400,64 --mask causal-bottom-right --heads-kv 4
step verify-15-f16 60 $R $fr verify --backends cuda --dtype f16 --shape 4,16,1000,1000,64 --mask causal
step verify-15-nomask 60 $R $fr verify --backends cuda --dtype bf16 --shape 3,8,700,900,64 --mask none --heads-kv 1
step verify-15-short 60 $R $fr verify --backends cuda --dtype bf16 --shape 5,3,130,70,40 --mask causal
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-15 90 $R compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,600,64 --mask causal-bottom-right
done
step racecheck-15-nomask 90 $R compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 2,4,300,257,64 --mask none
# O and L against the default's, bit for bit.
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(311)
for name, (Bn, H, Sq, Sk, D) in {"s64": (2, 16, 1000, 1000, 64), "r64": (3, 8, 1024, 700, 64), "t64": (4, 4, 512, 512, 64)}.items():
    for t, S in (("q", Sq), ("do", Sq), ("k", Sk), ("v", Sk)):
        np.save(f"{d}/{name}_{t}.npy", rng.standard_normal((Bn, H, S, D), dtype=np.float32))
PY
same=0; differ=0
for c in s64 r64 t64; do for m in causal-bottom-right causal none; do
  for tune in "" fwd90=15; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask $m > /dev/null 2>>$OUT/bits.log || echo "run failed $tune $c $m" >> $OUT/bits.log
  done
  for f in o lse; do if cmp -s $B/out-/$f.npy $B/out-fwd90=15/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $c $m $f" >> $OUT/bits.log; fi; done
done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/bits.log
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],4), round(x['min_ms'],4)) for x in r if x['pass']=='forward'])" "$r" 2>/dev/null)"
}
for round in 1 2 3; do
  case $round in 1|3) sides=(def fwd90=15);; 2) sides=(fwd90=15 def);; esac
  for s in "${sides[@]}"; do one $s s1024,64 --shape 32,16,1024,1024,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s512,64 --shape 64,16,512,512,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s1024nm,64 --shape 32,16,1024,1024,64 --mask none; done
done
# The d = 128 backward's kernels, each alone under Nsight Compute (ours, then cuDNN's).
for S in 1024 2048; do
  B=$((32768 / S))
  ncu --clock-control none --metrics gpu__time_duration.sum --kernel-name regex:'bwd_|dq|fwd_' \
    --launch-skip 0 --launch-count 12 $fr bench --backends cuda --shape $B,16,$S,$S,128 --dtype bf16 \
    --mask causal --backward --reps 1 --warmup 1 > $OUT/ncu-ours-$S.txt 2>&1
  timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --profile-from-start off \
    python3 bench/peer_kernels.py --peer cudnn --shape $B,16,$S,128 > $OUT/ncu-cudnn-$S.txt 2>&1
  echo "ncu S=$S rc=$?"
done
grep -h -E "^  [a-z_].*\(|gpu__time_duration" $OUT/ncu-*.txt | paste - - | sed -E 's/ +/ /g' | cut -c1-160
date -u
