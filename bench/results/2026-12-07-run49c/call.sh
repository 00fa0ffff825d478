#!/usr/bin/env bash
# Run 49c (main after the merge of cand-hd; .device built at cb18dff, the same kernels): the new
# default at d = 32 and 256 on persistent grids with several tiles a block (`flashref verify`,
# the steps scripts/device-run's tests now hold), then the Python suite on the GPU through the
# package built there from this tree (python/tests, the default family at every head dim).
# There: bash bench/results/2026-12-07-run49c/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
step verify-persistent-d32 120 "$fr" verify --backends cuda --shape 4,16,1024,1024,32 \
  --mask causal --dtype bf16
step verify-persistent-d256 180 "$fr" verify --backends cuda --shape 2,16,1024,1024,256 \
  --mask causal-bottom-right --dtype f16
python_suite "${CALL_LIMIT:-400}"
date -u
