#!/usr/bin/env bash
# Run 28c (after run 28b): the final build of run 28 (the losing variants deleted) through the
# suites that reach the fused backward; then Nsight Compute's source counters of the two-writer
# backward at d = 128 (the leaderboard, and S = 1k to set beside run 24b's), the SASS counts
# (HGMMA, local memory) of every kernel; and fwd90=5 (the short d = 64 forward with the
# diagonal's key tile halved for the consumer of a tile's first rows): the suites, `verify`,
# racecheck and memcheck, O and L against the default's bits, then timed against the default
# and the 192-row tiles (fwd90=7) at S = 1k, and against the default at S = 512, two rounds.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test cuda_large_problems_test cuda_backend_contract_test" scripts/device-build,
# then cp dev/sm90/call28c.sh .device/; on the device: bash .device/call28c.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
ND=FLASHREF_TEST_NONDETERMINISTIC=1
step contract 60 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-g2 60 env FLASHREF_CUDA_TUNE=grid90=2 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 60 env $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-nomask-64 60 $fr verify --backends cuda --dtype bf16 --shape 2,8,2000,2000,64 --mask none
step racecheck-g2-128 60 env FLASHREF_CUDA_TUNE=grid90=2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
F5="env FLASHREF_CUDA_TUNE=fwd90=5"
step awkward-f5 60 $F5 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-f5 60 $F5 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step verify-f5-br 60 $F5 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1300,64 --mask causal-bottom-right --heads-kv 2
step verify-f5-tr 60 $F5 $fr verify --backends cuda --dtype f16 --shape 2,8,1024,700,64 --mask causal
step verify-f5-none 60 $F5 $fr verify --backends cuda --dtype bf16 --shape 2,8,900,800,64 --mask none
step racecheck-f5 60 $F5 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1000,1100,64 --mask causal-bottom-right
step memcheck-f5 60 $F5 compute-sanitizer --tool memcheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1000,800,64 --mask causal
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(28)
for name, (Bn, H, Sq, Sk) in {"sq": (2, 4, 1024, 1024), "br": (1, 4, 1000, 1300), "short_k": (1, 4, 900, 800)}.items():
    for t, S in (("q", Sq), ("do", Sq), ("k", Sk), ("v", Sk)):
        np.save(f"{d}/{name}_{t}.npy", rng.standard_normal((Bn, H, S, 64), dtype=np.float32))
PY
same=0; differ=0
for c in sq br short_k; do for dm in "bf16 causal" "f16 causal-bottom-right" "bf16 none"; do
  read -r dt mk <<<"$dm"
  for tune in "" fwd90=5; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype $dt --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $tune $c $dm" >> $OUT/t/bits.log
  done
  for f in o lse; do if cmp -s $B/out-/$f.npy $B/out-fwd90=5/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $c $dm $f" >> $OUT/t/bits.log; fi; done
done; done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
j=$OUT/time/times.jsonl; : > $j
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],3), round(x['min_ms'],3)) for x in r])" "$r" 2>/dev/null)"
}
for round in 1 2 3; do
  sides=(def fwd90=5 fwd90=7); ((round == 2)) && sides=(fwd90=5 fwd90=7 def); ((round == 3)) && sides=(fwd90=7 def fwd90=5)
  for s in "${sides[@]}"; do one $s s1024,64-fwd --shape 32,16,1024,1024,64 --mask causal; done
  sides=(def fwd90=5); ((round == 2)) && sides=(fwd90=5 def)
  for s in "${sides[@]}"; do one $s s512,64-fwd --shape 64,16,512,512,64 --mask causal; done
done
t0=$SECONDS
FLASHREF_PROFILE_KERNEL=bwd_dkdv FLASHREF_PROFILE_SHAPES='1,16,16384,16384,128 --dtype bf16;32,16,1024,1024,128 --dtype bf16' \
  OUT=$OUT/profile-bwd128 timeout 200 bash scripts/device-run profile-source > /dev/null 2>&1
echo "profile rc=$? $((SECONDS-t0))s"; grep -hE "Duration|Elapsed Cycles|SM Frequency" $OUT/profile-bwd128/profile-source-*.txt | tr -s ' ' | head
t0=$SECONDS
OUT=$OUT/sass timeout 100 bash scripts/device-run sass > /dev/null 2>&1
echo "sass rc=$? $((SECONDS-t0))s"; grep -E "bwd_dkdv" $OUT/sass/sass.txt | cut -c1-60,111- | head -20
tar -C $OUT -czf $OUT/profiles.tgz profile-bwd128 2>/dev/null && rm -rf $OUT/profile-bwd128
date -u
