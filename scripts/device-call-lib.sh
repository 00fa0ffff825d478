# Sourced by a device call's script (bench/results/<run>/call.sh), there, from the repository
# root: the setup and helpers every such call repeated. After `source scripts/device-call-lib.sh`:
#   $b, $fr       the staged programs' folder (.device/bin.tar.xz unpacked) and flashref
#   $T            $OUT/tests.log, each step's output; $OUT/steps.txt, one line a step
#   step NAME LIMIT CMD...     runs CMD under `timeout LIMIT`, logs it, prints rc, time, last line
#   fwd LABEL SHAPE [TUNE]     `flashref bench` forward, causal bf16 (FWD_MASK=none: without the
#                              mask), medians of 30, with FLASHREF_CUDA_TUNE=TUNE: one line
#                              "bench fwd LABEL SHAPE [(pass, median ms, min ms)]"
#   bwd LABEL SHAPE [TUNE]     `flashref bench` backward, causal bf16, medians of 20: one line
#                              "bench bwd LABEL SHAPE [(pass, median ms)]"
#   bwd_rounds TUNE SHAPE...   bwd of the default and of TUNE on each SHAPE, two rounds, the
#                              order turned in the second
#   family_rounds A B SHAPE...  fwd and bwd under FLASHREF_CUDA_FAMILY=A and =B on each SHAPE,
#                              two rounds, the order turned in the second
#   tuned TUNE PROGRAM         a wrapper script that runs PROGRAM under FLASHREF_CUDA_TUNE=TUNE
#                              (for scripts/cuda-bits' OLD and NEW)
#   python_suite END           builds the Python package there (device-run python-build) and runs
#                              python/tests on the GPU until SECONDS = END: $OUT/pytest.log
#   goal_table END [TAG]       builds the Python package there and runs the goal's table beside
#                              the peers (bench/interleaved.py) until SECONDS = END:
#                              $OUT/interleaved[TAG].{json,log}
#   suites END                 `scripts/device-run tests sanitize` until SECONDS = END, its
#                              console into $T, its folder packed into $OUT/run.tgz (a call
#                              brings back at most 8 files) and its summary.txt beside it
date -u; cat .device/commit; nvidia-smi --query-gpu=name --format=csv,noheader
_call_work=$(mktemp -d)
tar -C "$_call_work" -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$_call_work/lib
b=$_call_work/bin
fr=$b/flashref
mkdir -p "$OUT"
T=$OUT/tests.log
: >"$T"
step() {
  local name=$1 lim=$2
  shift 2
  local t0=$SECONDS
  echo "### $name" >>"$T"
  timeout "$lim" "$@" >>"$T" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s $(tail -1 "$T" | cut -c1-100)" | tee -a "$OUT/steps.txt"
}
fwd() {
  echo "bench fwd $1 $2 $(FLASHREF_CUDA_TUNE=${3:-} timeout 60 "$fr" bench --backends cuda --dtype bf16 \
    --reps 30 --warmup 5 --json --shape "$2" --mask "${FWD_MASK:-causal}" 2>&1 | tr -d '\n' |
    python3 -c \
    "import json,sys; r=json.load(sys.stdin); print([(x['pass'], round(x['median_ms'],4), round(x.get('min_ms',0),4)) for x in r])")"
}
bwd() {
  echo "bench bwd $1 $2 $(FLASHREF_CUDA_TUNE=${3:-} timeout 60 "$fr" bench --backends cuda \
    --dtype bf16 --reps 20 --warmup 3 --json --shape "$2" --mask causal --backward 2>&1 |
    tr -d '\n' | python3 -c "import json,sys; r=json.load(sys.stdin); print([(x['pass'], \
round(x['median_ms'],4)) for x in r if x['pass'] != 'forward'])")"
}
bwd_rounds() {
  local tune=$1 round shape tu tunes
  shift
  for round in 0 1; do
    tunes=("" "$tune")
    ((round)) && tunes=("$tune" "")
    for shape in "$@"; do
      for tu in "${tunes[@]}"; do bwd "${tu:-default}" "$shape" "$tu"; done
    done
  done
}
family_rounds() {
  local fa=$1 fb=$2 round shape f fams
  shift 2
  for round in 0 1; do
    fams=("$fa" "$fb")
    ((round)) && fams=("$fb" "$fa")
    for shape in "$@"; do
      for f in "${fams[@]}"; do
        FLASHREF_CUDA_FAMILY=$f fwd "$f" "$shape"
        FLASHREF_CUDA_FAMILY=$f bwd "$f" "$shape"
      done
    done
  done
}
tuned() {
  local f
  f=$(mktemp)
  printf '#!/bin/sh\nFLASHREF_CUDA_TUNE=%s exec %s "$@"\n' "$1" "$2" >"$f"
  chmod +x "$f"
  echo "$f"
}
python_suite() {
  python_build
  local lim=$(($1 - SECONDS)) t0=$SECONDS
  ((lim > 30)) || return 0
  (PYTHONPATH=$PWD/build-python-device/site timeout $lim python3 -m pytest -q -rs \
    -p no:cacheprovider python/tests >"$OUT/pytest.log" 2>&1)
  echo "pytest rc=$? $((SECONDS - t0))s $(tail -1 "$OUT/pytest.log")" | tee -a "$OUT/steps.txt"
}
_python_built=0
python_build() {  # once a call
  ((_python_built)) && return 0
  _python_built=1
  local t0=$SECONDS
  bash scripts/device-run python-build >"$OUT/python-build.log" 2>&1
  echo "python-build rc=$? $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
}
goal_table() {
  python_build
  local lim=$(($1 - SECONDS)) t0=$SECONDS
  ((lim > 30)) || return 0
  local configs=leaderboard,leaderboard128,leaderboard-noncausal,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' \
    1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768)f32,f32-d128,f32-b8-d128
  local tag=${2:-}
  (cd bench && PYTHONPATH=$PWD/../build-python-device/site timeout $lim python3 interleaved.py \
    --out $OUT/interleaved$tag.json --configs $configs) >$OUT/interleaved$tag.log 2>&1
  echo "interleaved$tag rc=$? $((SECONDS - t0))s" | tee -a $OUT/steps.txt
  grep "^|" $OUT/interleaved$tag.log | tail -22
}
suites() {
  local t0=$SECONDS
  OUT=$OUT/run timeout $(($1 - SECONDS)) bash scripts/device-run tests sanitize >>"$T" 2>&1
  echo "device-run rc=$? $((SECONDS - t0))s"
  cp "$OUT/run/summary.txt" "$OUT/summary.txt" 2>/dev/null
  tar -C "$OUT" -czf "$OUT/run.tgz" run && rm -rf "$OUT/run"
  tail -40 "$OUT/summary.txt" 2>/dev/null
}
