#!/usr/bin/env bash
# Run 19c: the default build of 09cb366 (full tiles without index math) against the one before
# (.device/base-bin.tar.xz, 7446a67's default build): the cuda tests and the sanitizers on the
# new build, the same bits as the base (a short form of scripts/cuda-bits: 60 outputs), then
# base and new alternately on five of the goal's problems (one invocation each, median of 20).
# No peers: the call had 271 s of device time left after four failed machine starts.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; mkdir -p $w/base; tar -C $w/base -xJf .device/base-bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref; base=$w/base/bin/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step awkward 100 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-long-tiles 100 env FLASHREF_CUDA_TUNE=fwd90=7 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-other-dq 100 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 100 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-1k 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1024,1024,64 --mask causal
step verify-gqa-128 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step fuzz-cuda 90 $fr fuzz --backend cuda --seconds 15 --max-seq 400 --seed $(date +%s)
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
for tool in memcheck racecheck synccheck; do
  step $tool 60 compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
done
step racecheck-verify-128 40 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,600,600,128 --heads-kv 2 --mask causal
# The same bits as the base (scripts/cuda-bits' comparison on fewer problems: the sm90 kernels'
# head dims, full tiles after masked ones, GQA, S_q > S_k with empty rows).
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(11)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 333, 333), "long": (1, 2, 1, 1000, 1000), "short_k": (1, 3, 1, 200, 77)}.items():
    for D in (64, 128):
        p = f"{d}/{name}_d{D}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, D), dtype=np.float32))
PY
same=0; differ=0
for c in gqa long; do for D in 64 128; do for dm in "bf16 none" "bf16 causal-bottom-right" "f16 causal"; do
  read -r dt mk <<<"$dm"
  for side in old new; do
    exe=$fr; [[ $side == old ]] && exe=$base
    rm -rf $B/out-$side; $exe run --backend cuda --out $B/out-$side --q $B/${c}_d${D}_q.npy --k $B/${c}_d${D}_k.npy --v $B/${c}_d${D}_v.npy --do $B/${c}_d${D}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $side $c $D $dm" >> $OUT/t/bits.log
  done
  for f in o lse dq dk dv; do if cmp -s $B/out-old/$f.npy $B/out-new/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $c d$D $dm $f" >> $OUT/t/bits.log; fi; done
done; done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
j=$OUT/time/times.jsonl; : > $j
one() {  # exe tune label args...
  local exe=$1 label=$2; shift 2
  ((SECONDS > 150)) && return
  local t0=$SECONDS
  local r=$(timeout 60 $exe bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$( [[ $exe == $base ]] && echo base || echo new)\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label $( [[ $exe == $base ]] && echo base) $((SECONDS-t0))s"
}
for p in "s1024,64 --shape 32,16,1024,1024,64" "lb,64 --shape 1,16,16384,16384,64" "s1024,128 --shape 32,16,1024,1024,128" "lb,128 --shape 1,16,16384,16384,128" "lb-nomask,64 --shape 1,16,16384,16384,64 --mask none"; do
  read -r label args <<<"$p"
  [[ $args == *mask* ]] || args="$args --mask causal"
  one $base "$label" $args
  one $fr "$label" $args
done
date -u
