#!/usr/bin/env bash
# Run 21b: the goal's problems with ours and the peers timed in alternation (bench/interleaved.py:
# bursts of about 15 ms in a rotating order, 16 rounds, the median of every call), nvidia-smi
# sampling the clock and power every 100 ms; then `flashref bench` (the C++ harness) on the same
# problems, as in run 20d. The kernels are c8e359a's (.device/commit), unchanged since run 20d.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit; git log -1 --format=%h 2>/dev/null
t0=$SECONDS
bash scripts/device-run python-build > $OUT/python-build.log 2>&1
echo "python-build rc=$? $((SECONDS-t0))s"
site=$PWD/build-python-device/site
[[ -d $site ]] || { echo "no package"; exit 1; }
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
fr=$w/bin/flashref
mkdir -p $OUT/time
configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv -lms 100 > $OUT/time/clocks.csv 2>&1 &
smi=$!
t0=$SECONDS
(cd bench && PYTHONPATH=$site timeout 300 python3 interleaved.py --out $OUT/time/interleaved.json --configs $configs) > $OUT/time/interleaved.log 2>&1
echo "interleaved rc=$? $((SECONDS-t0))s"
kill $smi
tail -22 $OUT/time/interleaved.log
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
for s in 1024 2048 4096 8192 16384 32768; do for d in 64 128; do
  bench fa3grid-s$s-d$d --shape $((32768 / s)),16,$s,$s,$d --mask causal --dtype bf16
done; done
bench f32 --shape 1,1,16384,16384,64 --mask causal --dtype f32
bench f32-d128 --shape 1,1,16384,16384,128 --mask causal --dtype f32
bench f32-b8-d128 --shape 8,1,4096,4096,128 --mask none --dtype f32
echo "bench done $SECONDS s"
date -u
