#!/usr/bin/env bash
# Run 34f: through the Python package built there, where our forward+backward's time beyond the
# sum of its passes goes (bench/fb_excess.py: 0.22 ms on the d = 128 leaderboard in run 34b,
# cuDNN's 0.05, which decides that problem's goal), with nvidia-smi's clocks sampled beside it,
# then the goal's table (bench/interleaved.py), on the build of run 34d once its suites passed.
# Here: the build of run 34d (.device); there: bash bench/results/2026-12-05-h200-run34f/call.sh,
# carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
mkdir -p $OUT
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
smi=$!
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 120 python3 fb_excess.py --out $OUT/fb_excess.json --configs leaderboard128,leaderboard) > $OUT/fb_excess.log 2>&1
echo "fb_excess rc=$? $((SECONDS-t0))s"; grep -v "^    " $OUT/fb_excess.log | cut -c1-200
kill $smi
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
lim=$((585 - SECONDS)); ((lim > 240)) && lim=240
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout $lim python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"; grep "^|" $OUT/interleaved.log | tail -22
date -u
