#!/usr/bin/env bash
# Run 29a. Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_determinism_test cuda_large_problems_test cuda_tf32_test cuda_ring_test
# cuda_ring_device_test" scripts/device-build; on the device: bash .device/call29a.sh, carrying .device.
# What it runs: fused90=2 (dQ's product deferred a step) and fused90=3 (the same, with turns)
# through the awkward shapes and `verify` as a gate; then two rounds of timings, order rotating,
# against the default and the atomic kernel; then the sanitizers on two blocks, the default's
# suites not yet run on the two-writer kernel (TF32, ring), and the bits against the default.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time; T=$OUT/t/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
ND=FLASHREF_TEST_NONDETERMINISTIC=1
# Gate: small problems fused (bwd90=1 flips the fused/two-pass choice below S_k = 1024) on two
# blocks; S >= 1024 fused by default.
for v in 2 3; do
  S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=$v"
  G="env FLASHREF_CUDA_TUNE=grid90=2,fused90=$v"
  step awkward-s2-$v 100 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
  step verify-gqa-128-g2-$v 60 $G $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
  step verify-64-g2-$v 60 $G $fr verify --backends cuda --dtype bf16 --shape 2,8,1300,1300,64 --mask causal
done
j=$OUT/time/times.jsonl; : > $j
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  ((SECONDS > 330)) && return
  local t0=$SECONDS
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"$tune\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label [$tune] $((SECONDS-t0))s $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2; do
for p in "s1024,128 def,2,3,atomic,3a --shape 32,16,1024,1024,128" "lb,128 def,2,3,atomic,3a --shape 1,16,16384,16384,128" "s1024,64 def,2,3 --shape 32,16,1024,1024,64" "lb,64 def,2,3 --shape 1,16,16384,16384,64" "s4096,128 def,3 --shape 8,16,4096,4096,128"; do
  read -r label list args <<<"$p"
  args="$args --mask causal"
  sides=(${list//,/ })
  for ((r = 0; r < round - 1; ++r)); do sides=("${sides[@]:1}" "${sides[0]}"); done
  for s in "${sides[@]}"; do case $s in
    def) one def "$label" $args;;
    atomic) one def "$label-atomic" $args --nondeterministic;;
    3a) one fused90=3 "$label-atomic" $args --nondeterministic;;
    *) one fused90=$s "$label" $args;;
  esac; done
done; done
for v in 3 2; do
  S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=$v"
  G="env FLASHREF_CUDA_TUNE=grid90=2,fused90=$v"
  for tool in racecheck synccheck; do
    step $tool-g2-128-$v 60 $G compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  done
  ((SECONDS > 480)) && continue
  step racecheck-g2-64-$v 60 $G compute-sanitizer --tool racecheck --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1100,64 --mask causal
  step awkward-s2-atomic-$v 100 $S2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
done
((SECONDS < 520)) && step tf32 60 $b/cuda_tf32_test --gtest_brief=1
((SECONDS < 520)) && step ring 60 $b/cuda_ring_test --gtest_brief=1
((SECONDS < 540)) && step ring-device 50 $b/cuda_ring_device_test --gtest_brief=1
date -u
