#!/usr/bin/env bash
# Run 26d: the leaderboard without the mask (d = 64 and 128), backward, persistent (default)
# against a block per key tile (fused90=1), alternating, two rounds.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib; fr=$w/bin/flashref
j=$OUT/times.jsonl; : > $j
for round in 1 2 3; do for d in 64 128; do
  sides=("" fused90=1); ((round == 2)) && sides=(fused90=1 "")
  for tune in "${sides[@]}"; do
    ((SECONDS > 150)) && break
    r=$(FLASHREF_CUDA_TUNE=$tune timeout 60 $fr bench --backends cuda --dtype bf16 --reps 20 --warmup 3 --json --backward --shape 1,16,16384,16384,$d --mask none 2>&1 | tr -d '\n')
    echo "{\"d\": $d, \"tune\": \"$tune\", \"rows\": $r}" >> $j
    echo "d=$d [$tune] $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print([round(x['median_ms'],3) for x in r if x['pass']=='backward'])" "$r")"
  done
done; done
date -u
