#!/usr/bin/env bash
# Run 22c: the goal's whole table in one call, in alternation with the peers (bench/interleaved.py,
# every problem of run 21b's set: the leaderboards, FlashAttention-3's grid at both head dims,
# the float32 problems), through the Python layer with its eager path; then the Python suite's
# CUDA file. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
[[ -d $site ]] || { echo "no package"; tail -20 $OUT/python-build.log; exit 1; }
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
smi=$!
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 200 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"
kill $smi
tail -22 $OUT/interleaved.log
t0=$SECONDS
PYTHONPATH=$site timeout 120 python3 -m pytest -q -x python/tests/test_cuda.py python/tests/test_torch.py > $OUT/pytest.log 2>&1
echo "pytest test_cuda test_torch rc=$? $((SECONDS-t0))s: $(tail -1 $OUT/pytest.log)"
date -u
