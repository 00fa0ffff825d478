#!/usr/bin/env bash
# Run 41d (2026-12-06): the clock and power ours and cuDNN's run at under sustained load
# (bench/clock_probe.py), where run 41c's isolated kernel times (Nsight Compute) put our d = 128
# backward at S = 8k at 0.955x cuDNN's and run 41b's bursts at 0.987x: the d = 128 backward at
# S = 8k (B 4) and 16k (B 2), and d = 64's forward at S = 1k (B 32), three turns each.
# Here: nothing to build (the Python package is built there from the working tree); there:
# bash bench/results/2026-12-06-run41d/call.sh, carrying .device (timeout_s 300).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
python_build
probe() {
  (cd bench && PYTHONPATH=$PWD/../build-python-device/site timeout 60 python3 clock_probe.py "$@")
}
{
  probe --shape 4,16,8192,128 --pass bwd
  probe --shape 2,16,16384,128 --pass bwd
  probe --shape 32,16,1024,64 --pass fwd
} 2>&1 | tee $OUT/clocks.txt
date -u
