#!/usr/bin/env bash
# Run 33e: the SASS check of every kernel (local-memory traffic) and the Python suite on the GPU,
# on the build of run 33d (commit 5f4c5c1, the kernels as they land). Here: the build of run 33d;
# there: OUT=$OUT bash scripts/device-run sass python, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
OUT=$OUT bash scripts/device-run sass python
