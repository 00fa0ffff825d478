#!/usr/bin/env bash
# Run 30b (after run 30a): the default build with d = 64's ordered backward deferred with two
# writers on one dQ set at every S. Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test
# cuda_properties_test cuda_determinism_test cuda_large_problems_test cuda_family_test
# cuda_backend_contract_test" scripts/device-build; on the device: bash .device/call30b.sh,
# carrying .device.
# What it runs: the suites, `verify` and the sanitizers on the new default; its bits against the
# in-step kernels (fused90=2) and a block per key tile (fused90=1); the pipes of the short d = 64
# forward (ours and cuDNN's); then the goal's table through the Python layer.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
G2="env FLASHREF_CUDA_TUNE=grid90=2"
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2"
step family 30 $b/cuda_family_test --gtest_brief=1
step contract 60 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2 60 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 env RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step properties-s2 60 $S2 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step verify-64-causal-gqa 60 $fr verify --backends cuda --dtype bf16 --shape 2,4,2100,2100,64 --mask causal --heads-kv 2
step verify-64-br 60 $fr verify --backends cuda --dtype f16 --shape 1,4,1300,1700,64 --mask causal-bottom-right --grad-dtype f32
step verify-64-nomask 60 $fr verify --backends cuda --dtype bf16 --shape 2,2,1333,1500,64 --mask none --heads-kv 1
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-g2-64 90 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,64 --mask causal-bottom-right --heads-kv 2
done
step racecheck-g2-64-nomask 90 $G2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,2,1100,1100,64 --mask none
step fuzz 20 $fr fuzz --backend cuda --seconds 12 --max-seq 1500 --seed $(date +%s)
t0=$SECONDS; B=$w/bits; mkdir -p $B
python3 - $B <<'PY'
import sys, numpy as np
d = sys.argv[1]; rng = np.random.default_rng(301)
for name, (Bn, H, Hkv, Sq, Sk) in {"causal": (1, 4, 2, 2100, 2100), "nomask": (1, 2, 2, 1333, 1500)}.items():
    p = f"{d}/{name}"
    for t, h, S in (("q", H, Sq), ("do", H, Sq), ("k", Hkv, Sk), ("v", Hkv, Sk)):
        np.save(f"{p}_{t}.npy", rng.standard_normal((Bn, h, S, 64), dtype=np.float32))
PY
same=0; differ=0; tunes="fused90=2 fused90=1 grid90=3"
for c in causal nomask; do
  mk=causal; [[ $c == nomask ]] && mk=none
  for tune in "" $tunes; do
    rm -rf $B/out-$tune; FLASHREF_CUDA_TUNE=$tune $fr run --backend cuda --out $B/out-$tune --q $B/${c}_q.npy --k $B/${c}_k.npy --v $B/${c}_v.npy --do $B/${c}_do.npy --dtype bf16 --mask $mk > /dev/null 2>>$OUT/t/bits.log || echo "run failed $tune $c" >> $OUT/t/bits.log
  done
  for tune in $tunes; do for f in o lse dq dk dv; do if cmp -s $B/out-/$f.npy $B/out-$tune/$f.npy; then same=$((same+1)); else differ=$((differ+1)); echo "DIFFER $tune $c $f" >> $OUT/t/bits.log; fi; done; done
done
echo "bits: $same same, $differ differ, $((SECONDS-t0))s" | tee -a $OUT/t/bits.log
# The short d = 64 forward's pipes (S = 1k, B 32, H 16, causal): ours, then cuDNN's.
t0=$SECONDS
ncu --clock-control none --kernel-name regex:fwd_wgmma --launch-skip 2 --launch-count 1 \
  --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SpeedOfLight \
  $fr bench --backends cuda --dtype bf16 --shape 32,16,1024,1024,64 --mask causal --reps 1 --warmup 2 > $OUT/t/pipes-ours.txt 2>&1
ncu --clock-control none --profile-from-start off \
  --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SpeedOfLight \
  python3 bench/peer_kernels.py --peer cudnn --shape 32,16,1024,64 > $OUT/t/pipes-cudnn.txt 2>&1
echo "pipes rc=$? $((SECONDS-t0))s"
t0=$SECONDS
FLASHREF_PROFILE_KERNEL=fwd_wgmma FLASHREF_PROFILE_SHAPES="32,16,1024,1024,64 --dtype bf16" bash scripts/device-run profile-source > $OUT/t/profile.log 2>&1
echo "profile-source rc=$? $((SECONDS-t0))s"
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
(cd $OUT && tar -czf run30b.tgz --exclude=run30b.tgz --exclude=interleaved.json --exclude=interleaved.log --exclude=t/tests.log --exclude=t/bits.log . && find . -type f ! -name run30b.tgz ! -name interleaved.json ! -name interleaved.log ! -name tests.log ! -name bits.log -delete)
date -u
