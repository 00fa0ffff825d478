#!/usr/bin/env bash
# Run 41e (2026-12-06), the session's last 300 s of device time: run 41d put our d = 128
# backward at S = 8k at 0.948x cuDNN's back to back, where bench/interleaved.py's bursts (L2
# flushed before each call) measured 0.987x. Which condition moves cuDNN's time: the flush, or
# a lower duty cycle (idle gaps, so a higher clock)? bench/clock_probe.py, each timed by events.
# There: bash bench/results/2026-12-06-run41e/call.sh, carrying .device (timeout_s 180).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
python_build
probe() {
  (cd bench && PYTHONPATH=$PWD/../build-python-device/site timeout 40 python3 clock_probe.py \
    --shape 4,16,8192,128 --pass bwd "$@")
}
{
  echo "## back to back"; probe
  echo "## --flush"; probe --flush
  echo "## --idle-ms 10"; probe --idle-ms 10
  echo "## --flush --idle-ms 10"; probe --flush --idle-ms 10
} 2>&1 | tee $OUT/clocks.txt
date -u
