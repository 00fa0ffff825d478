#!/usr/bin/env bash
# Run 21c: the host time of flashref.attention by layer (python/bench/host_overhead.py).
set -u
cd "$(dirname "$0")/.."
date -u; git log -1 --format=%h
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
PYTHONPATH=$site timeout 120 python3 python/bench/host_overhead.py --out $OUT/host.json 2>&1 | tee $OUT/host.log | head -80
