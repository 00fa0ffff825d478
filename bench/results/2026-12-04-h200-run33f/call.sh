#!/usr/bin/env bash
# Run 33f: the 16-bit forward before and after this stop's fix (the rows past the fold's range
# computed again after the main loop), in one call: `flashref bench` of commit 5748505's build
# (.device/base-bin.tar.xz, without tuning variants) and of this build (.device/bin.tar.xz, run
# 33d's), in alternation, on the goal table's bf16 problems, forward only.
# Here: both builds (scripts/device-build; the older one from a worktree of 5748505 with
# FLASHREF_DEVICE_TESTS=cuda_family_test FLASHREF_DEVICE_VARIANTS=0, its bin.tar.xz copied to
# .device/base-bin.tar.xz); there: bash bench/results/2026-12-04-h200-run33f/call.sh.
set -u
cd "$(dirname "$0")/../../.."
date -u; cat .device/commit
new=$(mktemp -d); tar -C $new -xJf .device/bin.tar.xz
old=$(mktemp -d); tar -C $old -xJf .device/base-bin.tar.xz
one() {
  local side=$1 label=$2; shift 2
  local dir=$new; [[ $side == old ]] && dir=$old
  local r=$(LD_LIBRARY_PATH=$dir/lib timeout 60 $dir/bin/flashref bench --backends cuda --dtype bf16 --reps 30 --warmup 5 --json "$@" 2>&1 | tr -d '\n')
  echo "bench $label $side $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([(x['pass'], round(x['median_ms'],4), round(x['min_ms'],4)) for x in r])" "$r" 2>/dev/null || echo "$r" | cut -c1-300)"
}
for round in 1 2 3; do
  sides=(old new); ((round == 2)) && sides=(new old)
  for s in "${sides[@]}"; do one $s leaderboard --shape 1,16,16384,16384,64 --mask causal; done
  for s in "${sides[@]}"; do one $s leaderboard128 --shape 1,16,16384,16384,128 --mask causal; done
  for s in "${sides[@]}"; do one $s noncausal --shape 1,16,16384,16384,64 --mask none; done
  for s in "${sides[@]}"; do one $s s1024-d64 --shape 32,16,1024,1024,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s2048-d64 --shape 16,16,2048,2048,64 --mask causal; done
  for s in "${sides[@]}"; do one $s s8192-d64 --shape 4,16,8192,8192,64 --mask causal; done
done
date -u
