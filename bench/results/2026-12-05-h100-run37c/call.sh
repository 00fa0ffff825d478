#!/usr/bin/env bash
# Run 37c (2026-12-05): the deferred rescale (fwd90=10; 11 with the tree max) timed against the
# default, two rounds alternating; their awkward shapes and `verify`; and when either is more
# than 1% faster at d = 64, S = 1k, the goal's table with it and without it (bench/
# interleaved.py through a Python build with the tuning variants), in that order.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test" scripts/device-build; there: bash
# bench/results/2026-12-05-h100-run37c/call.sh, carrying .device (timeout_s 600).
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)" | tee -a $OUT/steps.txt; }
fwd() {  # label shape tune
  echo "bench fwd $1 $2 $(FLASHREF_CUDA_TUNE=${3:-} timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --shape $2 --mask causal 2>&1 | tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
for round in 0 1; do
  for shape in 32,16,1024,1024,64 16,16,2048,2048,64 1,16,16384,16384,64 32,16,1024,1024,128 1,16,16384,16384,128; do
    vs=(0 10 11); ((round)) && vs=(11 10 0)
    for v in "${vs[@]}"; do fwd v$v $shape fwd90=$v; done
  done
done | tee $OUT/times.txt
echo "times done ${SECONDS}s"
for v in 10 11; do step awkward-$v 60 env FLASHREF_CUDA_TUNE=fwd90=$v $b/cuda_awkward_shapes_test --gtest_brief=1; done
step verify-10-long-64 60 env FLASHREF_CUDA_TUNE=fwd90=10 $fr verify --backends cuda --dtype bf16 --shape 2,4,2100,1500,64 --mask causal-bottom-right
step verify-10-d128 60 env FLASHREF_CUDA_TUNE=fwd90=10 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1000,128 --mask causal --heads-kv 2
step verify-10-large-64 60 env FLASHREF_CUDA_TUNE=fwd90=10 $fr verify --backends cuda --dtype bf16 --shape 2,4,1024,1024,64 --mask causal --large
# The faster of 10 and 11 at d = 64, S = 1k, when it beats the default by more than 1%.
pick=$(python3 - $OUT/times.txt <<'PY'
import ast, re, statistics, sys
t = {}
for line in open(sys.argv[1]):
    m = re.match(r"bench fwd v(\d+) 32,16,1024,1024,64 (.*)", line)
    if m: t.setdefault(m.group(1), []).append(ast.literal_eval(m.group(2))[0][1])
base = statistics.mean(t.get("0", [1e9]))
best = min(("10", "11"), key=lambda v: statistics.mean(t.get(v, [1e9])))
print(best if statistics.mean(t.get(best, [1e9])) < 0.99 * base else "")
PY
)
echo "pick: ${pick:-none}"
if [[ -n $pick ]] && ((SECONDS < 300)); then
  t0=$SECONDS
  FLASHREF_PY_TUNING_VARIANTS=1 bash scripts/device-run python-build > $OUT/python-build.log 2>&1
  echo "python-build rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt
  site=$PWD/build-python-device/site
  configs=leaderboard,leaderboard128,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)leaderboard-noncausal
  for tune in fwd90=$pick ""; do
    ((SECONDS < 500)) || break
    t0=$SECONDS
    (cd bench && FLASHREF_CUDA_TUNE=$tune PYTHONPATH=$site timeout 90 python3 interleaved.py --out $OUT/interleaved-${tune:-default}.json --configs $configs) > $OUT/interleaved-${tune:-default}.log 2>&1
    echo "interleaved ${tune:-default} rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt; grep "^|" $OUT/interleaved-${tune:-default}.log | tail -16
  done
fi
date -u
