#!/usr/bin/env bash
# Run 29d (after run 29c): the default build with d = 64's atomic backward deferred.
# Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_family_test"
# scripts/device-build; on the device: bash .device/call29d.sh, carrying .device.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
ND=FLASHREF_TEST_NONDETERMINISTIC=1
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2"
G2="env FLASHREF_CUDA_TUNE=grid90=2"
step family 30 $b/cuda_family_test --gtest_brief=1
step awkward-atomic 60 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2-atomic 60 $S2 $ND $b/cuda_awkward_shapes_test --gtest_brief=1
step properties-atomic 60 $ND RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step fuzz-atomic 15 $fr fuzz --backend cuda --nondeterministic --seconds 10 --max-seq 1500 --seed $(date +%s)
for tool in racecheck synccheck memcheck; do
  step $tool-g2-64-atomic 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr bench --backends cuda --dtype bf16 --backward --nondeterministic --reps 1 --warmup 0 --shape 1,4,1100,1300,64 --mask causal
done
step racecheck-g2-64-atomic-nomask 60 $G2 compute-sanitizer --tool racecheck --error-exitcode 9 $fr bench --backends cuda --dtype bf16 --backward --nondeterministic --reps 1 --warmup 0 --shape 1,4,1100,1300,64 --mask none
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for s in def fused90=2; do one $s lb,64-atomic --shape 1,16,16384,16384,64 --mask causal --nondeterministic; done
for s in fused90=2 def; do one $s s1024,64-atomic --shape 32,16,1024,1024,64 --mask causal --nondeterministic; done
for s in def fused90=2; do one $s s4096,64-atomic --shape 8,16,4096,4096,64 --mask causal --nondeterministic; done
for s in fused90=2 def; do one $s lb,64-nomask-atomic --shape 1,16,16384,16384,64 --mask none --nondeterministic; done
date -u
