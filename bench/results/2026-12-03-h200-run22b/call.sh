#!/usr/bin/env bash
# Run 22b: the Python layer's eager path (flashref.attention calling _core directly): the
# package built there from this tree, its torch suite on the GPU, the host time by layer
# (python/bench/host_overhead.py), then the goal's problems in alternation with the peers
# (bench/interleaved.py), where run 21b found the S = 1k rows host-bound. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u; git log -1 --format=%h 2>/dev/null
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
[[ -d $site ]] || { echo "no package"; tail -20 $OUT/python-build.log; exit 1; }
t0=$SECONDS
PYTHONPATH=$site timeout 170 python3 -m pytest -q -x python/tests/test_torch.py > $OUT/pytest-torch.log 2>&1
echo "pytest test_torch rc=$? $((SECONDS-t0))s: $(tail -1 $OUT/pytest-torch.log)"
t0=$SECONDS
PYTHONPATH=$site timeout 60 python3 python/bench/host_overhead.py --out $OUT/host.json > $OUT/host.log 2>&1
echo "host_overhead rc=$? $((SECONDS-t0))s"; head -14 $OUT/host.log
left=$((560 - SECONDS)); ((left > 240)) && left=240
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 16384 16384)f32
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
smi=$!
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout $left python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s (limit $left)"
kill $smi
tail -40 $OUT/interleaved.log
date -u
