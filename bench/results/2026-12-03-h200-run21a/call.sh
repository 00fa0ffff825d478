#!/usr/bin/env bash
# Run 21a: the goal's problems timed in one harness. flashref's Python package is built here
# (scripts/device-run python-build: sm_90a, the kernels of .device/commit's tree), then
# bench/peers.py --flashref times flashref.attention with triton's do_bench beside cuDNN, FA2
# and the memory-efficient kernel in one process (ours before and after each problem's peers),
# with nvidia-smi sampling the clock and power every 100 ms; and `flashref bench` on the same
# problems (the C++ harness of runs 1-20) for the comparison of the two harnesses. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit; git log -1 --format=%h 2>/dev/null
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"; tail -3 $OUT/python-build.log
site=$PWD/build-python-device/site
[[ -d $site ]] || { echo "no package"; exit 1; }
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
fr=$w/bin/flashref
mkdir -p $OUT/time
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv -lms 100 > $OUT/time/clocks.csv 2>&1 &
smi=$!
t0=$SECONDS
PYTHONPATH=$site timeout 330 python3 bench/peers.py --flashref --out $OUT/time/peers.json --rep-ms 100 --configs $configs > $OUT/time/peers.log 2>&1
echo "peers rc=$? $((SECONDS-t0))s"
kill $smi
python3 bench/one_harness.py $OUT/time/peers.json | tee $OUT/time/one-harness.md
j=$OUT/time/bench.jsonl; : > $j
bench() {  # config args...
  local name=$1; shift
  ((SECONDS > 560)) && return
  local r=$(timeout 60 $fr bench --backends cuda --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"config\": \"$name\", \"tune\": \"\", \"rows\": $r}" >> $j
}
bench leaderboard --shape 1,16,16384,16384,64 --mask causal --dtype bf16
bench leaderboard128 --shape 1,16,16384,16384,128 --mask causal --dtype bf16
bench leaderboard-noncausal --shape 1,16,16384,16384,64 --mask none --dtype bf16
for s in 1024 2048; do for d in 64 128; do
  bench fa3grid-s$s-d$d --shape $((32768 / s)),16,$s,$s,$d --mask causal --dtype bf16
done; done
echo "bench done $SECONDS s"
date -u
