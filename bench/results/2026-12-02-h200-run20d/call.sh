#!/usr/bin/env bash
# Run 20d: the goal's table on the default build of c8e359a (the forward of 43cbbd0, the
# backward of 2ff2589) with PyTorch's peers in the same call, after the cuda tests that cover
# both passes, the sanitizers on the awkward subset and the SASS check. bench.jsonl is in
# scripts/device-run's format ({config, tune, rows}) for bench/fa3_grid.py. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
step awkward 100 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-other-dq 100 env FLASHREF_CUDA_TUNE=bwd90=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-atomic 100 env FLASHREF_TEST_NONDETERMINISTIC=1 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 100 env RC_PARAMS=max_success=100 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
step large 100 $b/cuda_large_problems_test --gtest_brief=1
step fuzz-cuda 40 $fr fuzz --backend cuda --seconds 10 --max-seq 400 --seed $(date +%s)
filter='Cuda/AwkwardShapes.*/partial_tiles_129_bf16_causal:Cuda/AwkwardShapes.*/sq_more_than_sk_f16_causal_bottom_right:Cuda/AwkwardShapes.*/gqa_6_over_2_f32_causal:Cuda/AwkwardShapes.*/d256_bf16_none:Cuda/AwkwardShapes.*/d40_f32_causal_bottom_right'
for tool in memcheck racecheck; do
  step $tool 60 compute-sanitizer --tool $tool --error-exitcode 9 $b/cuda_awkward_shapes_test --gtest_brief=1 --gtest_filter="$filter"
done
cuobjdump --dump-sass $fr 2>/dev/null | awk '/Function :/ {fn=$3} /LDL|STL/ {s[fn]++} /HGMMA/ {h[fn]++} END {n=0; for (f in s) {print "spill", f, s[f]; n++} m=0; for (f in h) m++; print "kernels with HGMMA:", m; print "kernels with local-memory traffic:", n}' | tee $OUT/t/sass.txt | tail -2
j=$OUT/time/bench.jsonl; : > $j
bench() {  # config args...
  local name=$1; shift
  ((SECONDS > 470)) && return
  local t0=$SECONDS
  local r=$(timeout 60 $fr bench --backends cuda --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"config\": \"$name\", \"tune\": \"\", \"rows\": $r}" >> $j
  echo "bench $name $((SECONDS-t0))s"
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
t0=$SECONDS
timeout 110 python3 bench/peers.py --out $OUT/time/peers.json --rep-ms 100 \
  --configs leaderboard,leaderboard128,leaderboard-noncausal,f32,f32-d128,f32-b8-d128,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768 | sed 's/,$//') > $OUT/time/peers.log 2>&1
echo "peers rc=$? $((SECONDS-t0))s"
date -u
