#!/usr/bin/env bash
# Run 29b (after run 29a): the default build with dQ's product deferred at d = 128.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test cuda_large_problems_test cuda_backend_contract_test cuda_ring_device_test"
# scripts/device-build; on the device: bash .device/call29b.sh, carrying .device.
# What it runs: the suites and sanitizers on the new default (also on two blocks, grid90=2);
# the default's bits against the other schedule (fused90=2: in step at d = 128, deferred at
# d = 64); two rounds of d = 64's deferred kernel against the default where run 29a did not
# time it; then the goal's table through the Python layer. Self-limited to about 560 s.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
ND=FLASHREF_TEST_NONDETERMINISTIC=1
G2="env FLASHREF_CUDA_TUNE=grid90=2"
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2"
step contract 60 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2 60 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2-atomic 60 $S2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-s2 60 $S2 RC_PARAMS=max_success=40 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step ring-device 50 $b/cuda_ring_device_test --gtest_brief=1
step verify-gqa-128 60 $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-f32grad-128 60 $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,128 --mask causal --grad-dtype f32
step verify-nomask-128 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,1500,2100,128 --mask none --heads-kv 2
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-g2-128 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
done
step racecheck-128-nomask 60 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype f16 --shape 1,4,1100,1300,128 --mask none
step racecheck-g2-128-atomic 60 $G2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr bench --backends cuda --dtype bf16 --backward --nondeterministic --reps 1 --warmup 0 --shape 1,4,1100,1300,128 --mask causal
step fuzz 20 $fr fuzz --backend cuda --seconds 10 --max-seq 1500 --seed $(date +%s)
step fuzz-atomic 15 $fr fuzz --backend cuda --nondeterministic --seconds 8 --max-seq 1500 --seed $(date +%s)
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(29)
for name, (Bn, H, Hkv, Sq, Sk) in {"gqa": (2, 4, 2, 1333, 1333), "long": (1, 2, 1, 2100, 2100), "sq_gt": (1, 2, 1, 1900, 1100)}.items():
    for Dh in (64, 128):
        p = f"{d}/{name}_d{Dh}"
        for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
            np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, Dh), dtype=np.float32))
PY
same=0; differ=0
tunes="fused90=2 grid90=3"
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
  ((SECONDS > 300)) && return
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2; do
  sides=(def fused90=2); ((round == 2)) && sides=(fused90=2 def)
  for p in "s2048,64 --shape 16,16,2048,2048,64 --mask causal" "s4096,64 --shape 8,16,4096,4096,64 --mask causal" "s8192,64 --shape 4,16,8192,8192,64 --mask causal" "lb,64-nomask --shape 1,16,16384,16384,64 --mask none"; do
    read -r label args <<<"$p"
    for s in "${sides[@]}"; do one $s $label $args; done
  done
done
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
lim=$((585 - SECONDS)); ((lim > 240)) && lim=240
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; tail -20 $OUT/interleaved.log
date -u
