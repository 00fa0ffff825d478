#!/usr/bin/env bash
# Run 31d: the SASS of the fused backward's ordered kernels, staged against the TMA's epilogue
# (why the TMA's is 2-3% slower on the d = 128 leaderboard's long walks), and their times alone.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz
export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT
cuobjdump --dump-sass $fr > $w/all.sass 2>&1
python3 - $w/all.sass $OUT <<'PY'
import re, sys, collections
text = open(sys.argv[1]).read(); out = sys.argv[2]
funcs = re.split(r"\n\s+Function : ", text)
keep = {}
for f in funcs[1:]:
    name = f.split("\n", 1)[0].strip()
    if "bwd_dkdv_wgmma_kernel" in name and "FusedColsDeferredTraitsI13__nv_bfloat16Li2ELi1ELi2E" in name:
        keep["d128-tma" if "StoreDkvByTma" in name else "d128-staged"] = f
    if "bwd_dkdv_wgmma_kernel" in name and "FusedRowsDeferredSharedTraitsI13__nv_bfloat16Li64ELi2ELi1E" in name:
        keep["d64-tma" if "StoreDkvByTma" in name else "d64-staged"] = f
for k, f in keep.items():
    open(f"{out}/{k}.sass", "w").write(f)
    ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", f))
    print(k, "instructions", sum(ops.values()), " ".join(f"{o}:{n}" for o, n in sorted(ops.items())))
PY
for k in d128-tma d128-staged d64-tma d64-staged; do [[ -f $OUT/$k.sass ]] && xz -9 $OUT/$k.sass; done
for tune in "" fused90=3 "" fused90=3; do
  FLASHREF_CUDA_TUNE=$tune ncu --clock-control none --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg --kernel-name regex:'bwd_dkdv' \
    --launch-skip 1 --launch-count 1 $fr bench --backends cuda --shape 1,16,16384,16384,128 --dtype bf16 \
    --mask causal --backward --reps 1 --warmup 1 2>&1 | grep -E "duration|cycles_elapsed" | sed "s/^/lb128 [$tune] /"
done
date -u
