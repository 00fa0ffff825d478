#!/usr/bin/env bash
# Run 26c: the goal's table in alternation through the Python layer (its build has the default
# kernels only: the persistent fused backward), then the source counters of the d = 128
# backward at S = 1k. Self-limited to about 560 s.
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
date -u
