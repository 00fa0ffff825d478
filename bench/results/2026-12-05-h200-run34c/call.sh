#!/usr/bin/env bash
# Run 34c: d = 64's 16-bit forward with the rows marked past the fold's range computed by a
# kernel of their own (FLASHREF_CUDA_TUNE fwd90=20, FwdTraitsRowsAfter) against the default,
# which computes them at its own end: the suites that reach those rows on the variant
# (CudaLargeScores, the awkward shapes' 16-bit cases, memcheck and racecheck), then the forward
# alone, in alternation, three rounds (docs/perf-notes.md, run 34c).
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test
# cuda_determinism_test" scripts/device-build; there: bash
# bench/results/2026-12-05-h200-run34c/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step large-scores-v20 60 env FLASHREF_CUDA_TUNE=fwd90=20 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaLargeScores.*'
step awkward-v20 90 env FLASHREF_CUDA_TUNE=fwd90=20 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-v20 60 env FLASHREF_CUDA_TUNE=fwd90=20 RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
for tool in memcheck racecheck; do
  step $tool-large-scores-v20 150 env FLASHREF_CUDA_TUNE=fwd90=20 compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter='CudaLargeScores.*'
done
step verify-bf16-short-v20 60 env FLASHREF_CUDA_TUNE=fwd90=20 $fr verify --backends cuda --dtype bf16 --shape 2,8,1000,1000,64 --mask causal
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == - ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2 3; do
  tunes=(- fwd90=20); ((round == 2)) && tunes=(fwd90=20 -)
  for s in "${tunes[@]}"; do one $s leaderboard --shape 1,16,16384,16384,64 --mask causal; done
  for s in "${tunes[@]}"; do one $s noncausal --shape 1,16,16384,16384,64 --mask none; done
  for s in "${tunes[@]}"; do one $s s1k --shape 32,16,1024,1024,64 --mask causal; done
  for s in "${tunes[@]}"; do one $s s1k-nomask --shape 32,16,1024,1024,64 --mask none; done
  for s in "${tunes[@]}"; do one $s s2k --shape 16,16,2048,2048,64 --mask causal; done
  for s in "${tunes[@]}"; do one $s s8k --shape 4,16,8192,8192,64 --mask causal; done
done
date -u
