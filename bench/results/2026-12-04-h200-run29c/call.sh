#!/usr/bin/env bash
# Run 29c (after run 29b): the default build with d = 64's ordered backward deferred on long
# walks (launch.hpp, fused_dq_schedule). Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test
# cuda_properties_test cuda_determinism_test cuda_large_problems_test cuda_family_test"
# scripts/device-build; on the device: bash .device/call29c.sh, carrying .device.
# What it runs: the suites, `verify` and the sanitizers where d = 64 now runs the deferred
# kernel; its bits against the in-step kernel (fused90=2); one round of d = 64's atomic
# kernel deferred (fused90=2) against in step; the source counters of the d = 128 deferred
# kernel on the leaderboard; then the goal's table through the Python layer.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
G2="env FLASHREF_CUDA_TUNE=grid90=2"
step family 30 $b/cuda_family_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-64-causal-6200 60 $fr verify --backends cuda --dtype bf16 --shape 1,4,6200,6200,64 --mask causal --heads-kv 2
step verify-64-br-6500 60 $fr verify --backends cuda --dtype f16 --shape 1,2,6500,7000,64 --mask causal-bottom-right --grad-dtype f32
step verify-64-nomask-3100 60 $fr verify --backends cuda --dtype bf16 --shape 2,4,3100,3300,64 --mask none --heads-kv 1
for tool in racecheck synccheck memcheck; do
  step $tool-g2-64-nomask 90 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,3100,3100,64 --mask none
done
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(291)
for name, (Bn, H, Hkv, Sq, Sk) in {"causal": (1, 2, 1, 6200, 6200), "nomask": (1, 2, 2, 3200, 3000)}.items():
    p = f"{d}/{name}"
    for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
        np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, 64), dtype=np.float32))
PY
same=0; differ=0; tunes="fused90=2 grid90=3"
for c in causal nomask; do
  mk=causal; [[ $c == nomask ]] && mk=none
  for tune in "" $tunes; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $tune $c" >> $OUT/t/bits.log
  done
  for tune in $tunes; do for f in o lse dq dk dv; do if cmp -s $B/out-/$f.npy $B/out-$tune/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c $f" >> $OUT/t/bits.log; fi; done; done
done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for s in def fused90=2 def fused90=2; do one $s lb,64-atomic --shape 1,16,16384,16384,64 --mask causal --nondeterministic; done
for s in def fused90=2; do one $s s1024,64-atomic --shape 32,16,1024,1024,64 --mask causal --nondeterministic; done
for s in def fused90=2; do one $s lb,64-nomask-atomic --shape 1,16,16384,16384,64 --mask none --nondeterministic; done
t0=$SECONDS
FLASHREF_PROFILE_KERNEL=bwd_fused FLASHREF_PROFILE_SHAPES="1,16,16384,16384,128 --dtype bf16" bash scripts/device-run profile-source sass > $OUT/t/profile.log 2>&1
echo "profile rc=$? $((SECONDS-t0))s"; grep -E "bwd_fused|dkdv" $OUT/sass.txt 2>/dev/null | grep -i "Deferred" | cut -c1-60,110-200 | head -6
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
lim=$((590 - SECONDS)); ((lim > 240)) && lim=240
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; tail -20 $OUT/interleaved.log
# At most 8 files come back: the rest in one archive.
(cd $OUT && tar -czf run29c.tgz --exclude=run29c.tgz --exclude=interleaved.json --exclude=interleaved.log --exclude=tests.log --exclude=bits.log . && find . -type f ! -name run29c.tgz ! -name interleaved.json ! -name interleaved.log ! -name tests.log ! -name bits.log -delete)
date -u
