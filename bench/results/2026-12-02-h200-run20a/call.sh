#!/usr/bin/env bash
# Run 20a: the default build of 43cbbd0 (the backward's full steps without the mask's index
# math) against the one before (.device/base-bin.tar.xz, 7446a67, whose backward kernels are
# main's before 43cbbd0): the cuda tests (default, the other deterministic strategy, the
# atomic one, the sm80 family), the sanitizers, the same bits as the base (sm90 and sm80
# families), then base and new alternately on the backward problems the change moves.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; mkdir -p $w/base; tar -C $w/base -xJf .device/base-bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref; base=$w/base/bin/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step awkward 100 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-other-dq 100 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 100 env FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-sm80 100 env FLASHREF_CUDA_FAMILY=sm80 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 100 $b/cuda_properties_test --gtest_brief=1
step properties-atomic 60 env FLASHREF_TEST_NONDETERMINISTIC=1 RC_PARAMS=max_success=80 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-1k 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-gqa-128 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-sq-gt-sk 60 $fr verify --backends cuda --dtype bf16 --shape 2,4,1500,1100,64 --mask causal-bottom-right
step fuzz-cuda 60 $fr fuzz --backend cuda --seconds 15 --max-seq 400 --seed $(date +%s)
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
for tool in memcheck racecheck synccheck; do
  step $tool 60 compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
done
step racecheck-verify-128 40 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,600,600,128 --heads-kv 2 --mask causal
step racecheck-verify-64-1k 60 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1100,64 --mask causal
# The same bits as the base, both families.
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(11)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 333, 333), "long": (1, 2, 1, 1100, 1100), "wide_k": (1, 2, 1, 700, 1300), "one_k": (1, 2, 1, 300, 1)}.items():
    for D in (64, 128):
        p = f"{d}/{name}_d{D}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, D), dtype=np.float32))
PY
same=0; differ=0
for fam in auto sm80; do for c in gqa long wide_k one_k; do for D in 64 128; do for dm in "bf16 none" "bf16 causal-bottom-right" "f16 causal"; do
  [[ $fam == sm80 && $c == gqa ]] && continue
  read -r dt mk <<<"$dm"
  for side in old new; do
    exe=$fr; [[ $side == old ]] && exe=$base
    rm -rf $B/out-$side; FLASHREF_CUDA_FAMILY=$fam $exe run --backend cuda --out $B/out-$side --q $B/${c}_d${D}_q.npy --k $B/${c}_d${D}_k.npy --v $B/${c}_d${D}_v.npy --do $B/${c}_d${D}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $side $fam $c $D $dm" >> $OUT/t/bits.log
  done
  for f in o lse dq dk dv; do if cmp -s $B/out-old/$f.npy $B/out-new/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $fam $c d$D $dm $f" >> $OUT/t/bits.log; fi; done
done; done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
j=$OUT/time/times.jsonl; : > $j
one() {  # exe label args...
  local exe=$1 label=$2; shift 2
  ((SECONDS > 520)) && return
  local t0=$SECONDS
  local r=$(timeout 60 $exe bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$( [[ $exe == $base ]] && echo base || echo new)\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label $( [[ $exe == $base ]] && echo base) $((SECONDS-t0))s"
}
for round in 1 2; do
for p in "lb,64 --shape 1,16,16384,16384,64" "lb,128 --shape 1,16,16384,16384,128" "lb-nomask,64 --shape 1,16,16384,16384,64 --mask none" "s1024,64 --shape 32,16,1024,1024,64" "s1024,128 --shape 32,16,1024,1024,128" "s4096,64 --shape 8,16,4096,4096,64"; do
  read -r label args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  one $base "$label" $args
  one $fr "$label" $args
done; done
date -u
