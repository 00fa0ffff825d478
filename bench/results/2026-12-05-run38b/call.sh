#!/usr/bin/env bash
# Run 38b (2026-12-05): every cuda suite, the cuda fuzz and compute-sanitizer on the defaults of
# this commit (d = 128's deferred rescale, the default since 0d1a151, has not had the full
# `scripts/device-run tests sanitize`; the rule's L term and the states judge changed since),
# the Python suite on the GPU (last run in 36d), and the goal's table beside the peers
# (bench/interleaved.py; it counts for the goal only on an H200).
# Here: scripts/device-build (every suite); there: bash bench/results/2026-12-05-run38b/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
t0=$SECONDS
bash scripts/device-run python-build >"$OUT/python-build.log" 2>&1
echo "python-build rc=$? $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
site=$PWD/build-python-device/site
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 120 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) >$OUT/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS - t0))s" | tee -a $OUT/steps.txt
grep "^|" $OUT/interleaved.log | tail -22
t0=$SECONDS
(PYTHONPATH=$site timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests >"$OUT/pytest.log" 2>&1)
echo "pytest rc=$? $((SECONDS - t0))s $(tail -1 "$OUT/pytest.log")" | tee -a "$OUT/steps.txt"
OUT=$OUT/run timeout $((590 - SECONDS)) bash scripts/device-run tests sanitize >$OUT/device-run.log 2>&1
echo "device-run rc=$? ${SECONDS}s"
tail -80 $OUT/run/summary.txt 2>/dev/null
date -u
