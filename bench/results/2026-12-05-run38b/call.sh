#!/usr/bin/env bash
# Run 38b (2026-12-05): every cuda suite, the cuda fuzz and compute-sanitizer on the defaults of
# this commit (d = 128's deferred rescale, the default since 0d1a151, has not had the full
# `scripts/device-run tests sanitize`; the rule's L term and the states judge changed this
# session), then the Python suite on the GPU (last run in 36d). No timing: run 38a chose no new
# default, and the goal's table needs an H200.
# Here: scripts/device-build (every suite); there: bash bench/results/2026-12-05-run38b/call.sh,
# carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p $OUT
OUT=$OUT/run timeout 380 bash scripts/device-run tests sanitize > $OUT/device-run.log 2>&1
echo "device-run rc=$? ${SECONDS}s"
cat $OUT/run/summary.txt 2>/dev/null | tail -80
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt
site=$PWD/build-python-device/site
lim=$((575 - SECONDS))
if ((lim > 30)); then
  t0=$SECONDS
  (PYTHONPATH=$site timeout $lim python3 -m pytest -q -rs -p no:cacheprovider python/tests > $OUT/pytest.log 2>&1)
  echo "pytest rc=$? $((SECONDS-t0))s $(tail -1 $OUT/pytest.log)" | tee -a $OUT/steps.txt
fi
date -u
