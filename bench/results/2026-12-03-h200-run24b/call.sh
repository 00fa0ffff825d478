#!/usr/bin/env bash
# Run 24b (prepared for the next stop, after call24a's suites pass): the goal's table in
# alternation through the Python layer, then the source counters of the short forward (d = 64)
# and the d = 128 backward at S = 1k. Self-limited to about 560 s.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 220 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; tail -22 $OUT/interleaved.log
((SECONDS < 440)) && FLASHREF_PROFILE_KERNEL=fwd_wgmma FLASHREF_PROFILE_SHAPES='32,16,1024,1024,64 --dtype bf16' \
  OUT=$OUT/profile-fwd64 timeout 100 bash scripts/device-run profile-source > /dev/null 2>&1
((SECONDS < 500)) && FLASHREF_PROFILE_KERNEL=bwd_dkdv FLASHREF_PROFILE_SHAPES='32,16,1024,1024,128 --dtype bf16' \
  OUT=$OUT/profile-bwd128 timeout 100 bash scripts/device-run profile-source > /dev/null 2>&1
tar -C $OUT -czf $OUT/profiles.tgz profile-fwd64 profile-bwd128 2>/dev/null && rm -rf $OUT/profile-fwd64 $OUT/profile-bwd128
date -u
