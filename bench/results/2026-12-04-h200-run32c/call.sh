#!/usr/bin/env bash
# Run 32c: the sm90_3xtf32 forward with fewer instructions a key tile (run 32b: issue slots 49%
# busy, the tensor pipe 43%): the halves in three instructions, Q's fragments in 8-byte loads.
# The suites' float32 cases, `verify`, the sanitizers, fuzzing, the forward against ffma's, its
# SASS (HGMMA, no local memory), and Nsight Compute's view of it. Here: FLASHREF_DEVICE_TESTS="cuda_awkward_shapes_test cuda_properties_test
# cuda_family_test cuda_backend_contract_test cuda_large_problems_test cuda_determinism_test"
# scripts/device-build; there: bash bench/results/2026-12-04-h200-run32c/call.sh, carrying .device.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT; T=$OUT/tests.log; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; echo "### $name" >> $T; timeout $lim "$@" >> $T 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(tail -1 $T | cut -c1-100)"; }
FF="env FLASHREF_CUDA_FAMILY=ffma"
step family 30 $b/cuda_family_test --gtest_brief=1
step contract 30 $b/cuda_backend_contract_test --gtest_brief=1
step awkward 90 $b/cuda_awkward_shapes_test --gtest_brief=1
step properties 90 env RC_PARAMS=max_success=80 $b/cuda_properties_test --gtest_brief=1
step determinism 60 $b/cuda_determinism_test --gtest_brief=1
V="$fr verify --backends cuda --dtype f32"
step verify-128-causal 60 $V --shape 2,8,1024,1024,128 --mask causal
step verify-128-br-gqa 60 $V --shape 1,4,1000,1300,128 --mask causal-bottom-right --heads-kv 2
step verify-128-long 90 $V --shape 1,2,4000,4000,128 --mask causal
step verify-72-nomask-mqa 60 $V --shape 2,4,700,900,72 --mask none --heads-kv 1
step verify-64-causal 60 $V --shape 2,8,2048,2048,64 --mask causal
step verify-40-br 60 $V --shape 1,3,130,70,40 --mask causal-bottom-right
step verify-128-sharp 60 $V --shape 1,4,512,512,128 --mask causal --scale 1.0
step verify-128-negscale 60 $V --shape 1,4,700,600,128 --mask none --scale -0.09
for tool in racecheck synccheck memcheck initcheck; do
  step $tool-128 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,600,700,128 --heads-kv 1 --mask causal-bottom-right
  step $tool-64 90 compute-sanitizer --tool $tool --error-exitcode 9 $V --shape 1,2,300,500,64 --mask none
done
step fuzz 15 $fr fuzz --backend cuda --seconds 10 --max-seq 2100 --seed $(date +%s)
step fuzz-f32 15 $fr fuzz --backend cuda --dtype f32 --seconds 10 --max-seq 2100 --seed $(date +%s)
one() {
  local fam=$1 label=$2; shift 2
  local r=$(FLASHREF_CUDA_FAMILY=$fam timeout 60 $fr bench --backends cuda --dtype f32 --reps 20 --warmup 3 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label [$fam] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2; do
  sides=(auto ffma); ((round == 2)) && sides=(ffma auto)
  for s in "${sides[@]}"; do one $s d128-causal --shape 1,1,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s d128-b8 --shape 8,1,4096,4096,128 --mask none; done
  for s in "${sides[@]}"; do one $s d64-causal --shape 1,1,16384,16384,64 --mask causal; done
  for s in "${sides[@]}"; do one $s d128-b4h16 --shape 4,16,2048,2048,128 --mask causal; done
done
cuobjdump --dump-sass $fr > $w/all.sass 2>&1
python3 - $w/all.sass <<'PY'
import re, sys, collections
funcs = re.split(r"\n\s+Function : ", open(sys.argv[1]).read())
for f in funcs[1:]:
    name = f.split("\n", 1)[0].strip()
    if "fwd_3xtf32_kernel" not in name:
        continue
    ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", f))
    print(name[:90], "instructions", sum(ops.values()), " ".join(f"{o}:{ops[o]}" for o in ("HGMMA", "LDL", "STL", "LDS", "STS", "F2F", "LOP3", "IADD3", "FADD", "MUFU")))
PY
# Where a key tile's time goes: the warps' stall reasons and the source counters of the kernel.
timeout 150 ncu --kernel-name regex:fwd_3xtf32 --launch-count 1 --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section SourceCounters $fr bench --backends cuda --dtype f32 --shape 8,1,4096,4096,128 \
  --mask none --reps 1 --warmup 0 > $OUT/ncu-b8.txt 2>&1
echo "ncu rc=$?"; grep -E "Stall|Issue Slot|Warp Cycles|Eligible|Active Warps|Pipe|Bank" $OUT/ncu-b8.txt | head -40
date -u
