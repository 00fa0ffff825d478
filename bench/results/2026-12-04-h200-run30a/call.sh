#!/usr/bin/env bash
# Planned run 30a (next session; copy to .device/, build with
# FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test cuda_determinism_test cuda_large_problems_test" scripts/device-build).
# fused90=3 (two writers on one dQ set: d = 64 deferred 2 stages, d = 128 deferred 3 stages)
# through the suites a default needs; d = 128's fused90=3 timed; source counters of the d = 128
# deferred kernel (regex bwd_dkdv).
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
R="env FLASHREF_CUDA_TUNE=fused90=3"
S2="env FLASHREF_CUDA_TUNE=bwd90=1,grid90=2,fused90=3"
G2="env FLASHREF_CUDA_TUNE=grid90=2,fused90=3"
step awkward 60 $R $b/cuda_awkward_shapes_test --gtest_brief=1
step awkward-s2 60 $S2 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 60 $R RC_PARAMS=max_success=60 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $R $b/cuda_determinism_test --gtest_brief=1
step large 100 $R $b/cuda_large_problems_test --gtest_brief=1
step verify-128 60 $R $fr verify --backends cuda --dtype bf16 --shape 4,16,1000,1500,128 --mask causal-bottom-right --heads-kv 4
step verify-64-f32grad 60 $R $fr verify --backends cuda --dtype f16 --shape 4,8,1300,1100,64 --mask causal --grad-dtype f32
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-g2-128 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,128 --heads-kv 2 --mask causal-bottom-right
  step $tool-g2-64 60 $G2 compute-sanitizer --tool $tool --error-exitcode 9 $fr verify --backends cuda --dtype bf16 --shape 1,4,1100,1300,64 --mask none
done
step fuzz 20 $R $fr fuzz --backend cuda --seconds 12 --max-seq 1500 --seed $(date +%s)
one() {
  local tune=$1 label=$2; shift 2; [[ $tune == def ]] && tune=""
  local r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(round(x['median_ms'],3), round(x['min_ms'],3)) for x in r if x['pass']=='backward'])" "$r" 2>/dev/null)"
}
for round in 1 2; do
  sides=(def fused90=3); ((round == 2)) && sides=(fused90=3 def)
  for s in "${sides[@]}"; do one $s lb,128 --shape 1,16,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s s1024,128 --shape 32,16,1024,1024,128 --mask causal; done
  for s in "${sides[@]}"; do one $s s4096,128 --shape 8,16,4096,4096,128 --mask causal; done
done
FLASHREF_PROFILE_KERNEL=bwd_dkdv FLASHREF_PROFILE_SHAPES="1,16,16384,16384,128 --dtype bf16" bash scripts/device-run profile-source > $OUT/profile.log 2>&1
# At most 8 files come back.
(cd $OUT && tar -czf run30a.tgz --exclude=run30a.tgz --exclude=tests.log . && find . -type f ! -name run30a.tgz ! -name tests.log -delete)
date -u
