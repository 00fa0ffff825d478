#!/usr/bin/env bash
# Run 37a (2026-12-05): every cuda suite, the fuzzing and compute-sanitizer on the defaults of
# commit 6fa48ef (narrow steps on d = 64's short causal tiles, the first dQ add stored, the
# clamped 3xTF32 split), which no full `device-run tests sanitize` has run since run 24a; on an
# H200, the goal's table first (bench/interleaved.py).
# Here: scripts/device-build (every suite); there: bash bench/results/2026-12-05-h200-run37a/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
mkdir -p $OUT
if [[ $gpu == *H200* ]]; then
  t0=$SECONDS
  bash scripts/device-run python-build > $OUT/python-build.log 2>&1
  echo "python-build rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt
  site=$PWD/build-python-device/site
  configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
  t0=$SECONDS
  (cd bench && PYTHONPATH=$site timeout 120 python3 interleaved.py --out $OUT/interleaved.json --configs $configs) > $OUT/interleaved.log 2>&1
  echo "interleaved rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt; grep "^|" $OUT/interleaved.log | tail -22
fi
OUT=$OUT/run timeout $((570 - SECONDS)) bash scripts/device-run tests sanitize > $OUT/device-run.log 2>&1
echo "device-run rc=$? ${SECONDS}s"
cat $OUT/run/summary.txt
date -u
