#!/usr/bin/env bash
# Run 39b (2026-12-06): the forward's causal mask read from a bit mask (visible_score_bits: one
# shift a row half, R2P, where a compare and an add a score stood), against the build before it
# (.device/base-bin.tar.xz, d879575, run 39a's). The same bits first (scripts/cuda-bits, 450
# outputs) and the awkward shapes; then the two builds timed alternately (d = 64 S = 1k and 2k,
# d = 128 1k, the d = 64 leaderboard); then the goal's table beside the peers (bench/
# interleaved.py, on this working tree's Python package: it counts for the goal only on an H200),
# the Python suite, and every cuda suite with the sanitizers for what is left of 590 s.
# Here: scripts/device-build, the old build's bin.tar.xz as base-bin.tar.xz; there: bash
# bench/results/2026-12-06-run39b/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
base=$(mktemp -d)
tar -C "$base" -xJf .device/base-bin.tar.xz
oldwrap=$(mktemp); printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$base/lib" "$base/bin/flashref" >$oldwrap; chmod +x $oldwrap
step awkward 60 $b/cuda_awkward_shapes_test --gtest_brief=1
step bits 120 scripts/cuda-bits $oldwrap $fr $OUT/bits-work
tail -1 $OUT/steps.txt | grep -q "^bits rc=0 " || { echo "not the same bits: stop"; exit 1; }
fwdb() {  # LABEL SHAPE BINARY
  echo "bench fwd $1 $2 $(timeout 60 "$3" bench --backends cuda --dtype bf16 --reps 30 --warmup 5 \
    --json --shape "$2" --mask causal 2>&1 | tr -d '\n' | python3 -c \
    "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
for round in 0 1; do
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 32,16,1024,1024,128 1,16,16384,16384,64; do
    if ((round)); then fwdb new $shape $fr; fwdb old $shape $oldwrap; else fwdb old $shape $oldwrap; fwdb new $shape $fr; fi
  done
done | tee $OUT/times.txt
echo "timing done ${SECONDS}s"
goal_table $((SECONDS + 200))
python_suite $((SECONDS + 110))
OUT=$OUT/run timeout $((590 - SECONDS)) bash scripts/device-run tests sanitize >$OUT/device-run.log 2>&1
echo "device-run rc=$? ${SECONDS}s"
tail -70 $OUT/run/summary.txt 2>/dev/null
date -u
