#!/usr/bin/env bash
# Run 20b: the goal's table on the default build of 43cbbd0 with PyTorch's peers in the same
# call (the leaderboards, no mask, FlashAttention-3's grid, float32), the SASS check, and a
# timeline of our forward+backward on the leaderboard (Nsight Systems, when the machine has it),
# to see where it spends more than the sum of its passes. Self-limited.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
w=$(mktemp -d); tar -C $w -xJf .device/bin.tar.xz; export LD_LIBRARY_PATH=$w/lib
b=$w/bin; fr=$b/flashref
mkdir -p $OUT/t $OUT/time $OUT/nsys
cuobjdump --dump-sass $fr 2>/dev/null | awk '/Function :/ {fn=$3} /LDL|STL/ {s[fn]++} /HGMMA/ {h[fn]++} END {n=0; for (f in s) {print "spill", f, s[f]; n++} m=0; for (f in h) m++; print "kernels with HGMMA:", m; print "kernels with local-memory traffic:", n}' | tee $OUT/t/sass.txt | tail -2
j=$OUT/time/times.jsonl; : > $j
one() {  # label args...
  local label=$1; shift
  local t0=$SECONDS
  local r=$(timeout 60 $fr bench --backends cuda --reps 20 --warmup 3 --json --backward "$@" 2>&1 | tr -d '\n')
  echo "{\"label\": \"$label\", \"tune\": \"\", \"args\": \"$*\", \"rows\": $r}" >> $j
  echo "bench $label $((SECONDS-t0))s"
}
one "lb,64" --shape 1,16,16384,16384,64 --mask causal --dtype bf16
one "lb,128" --shape 1,16,16384,16384,128 --mask causal --dtype bf16
one "lb-nomask,64" --shape 1,16,16384,16384,64 --mask none --dtype bf16
for s in 1024 2048 4096 8192 16384 32768; do for d in 64 128; do
  one "s$s,$d" --shape $((32768 / s)),16,$s,$s,$d --mask causal --dtype bf16
done; done
one "f32,64" --shape 1,1,16384,16384,64 --mask causal --dtype f32
one "f32,128" --shape 1,1,16384,16384,128 --mask causal --dtype f32
one "f32-b8,128" --shape 8,1,4096,4096,128 --mask none --dtype f32
t0=$SECONDS
timeout 200 python3 bench/peers.py --out $OUT/time/peers.json --rep-ms 100 \
  --configs leaderboard,leaderboard128,leaderboard-noncausal,f32,f32-d128,f32-b8-d128,$(printf 'fa3grid-s%s-d64,fa3grid-s%s-d128,' 1024 1024 2048 2048 4096 4096 8192 8192 16384 16384 32768 32768 | sed 's/,$//') > $OUT/time/peers.log 2>&1
echo "peers rc=$? $((SECONDS-t0))s"
ns=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${ns:-none}"
if [[ -n $ns ]]; then
  t0=$SECONDS
  timeout 100 $ns profile -t cuda -o $OUT/nsys/fb --force-overwrite true $fr bench --backends cuda --shape 1,16,16384,16384,64 --mask causal --dtype bf16 --backward --reps 6 --warmup 1 > $OUT/nsys/bench.txt 2>&1
  timeout 60 $ns stats -r cuda_gpu_trace,cuda_api_trace -f csv -o $OUT/nsys/trace $OUT/nsys/fb.nsys-rep > $OUT/nsys/stats.log 2>&1
  rm -f $OUT/nsys/fb.sqlite
  echo "nsys rc=$? $((SECONDS-t0))s"; ls -la $OUT/nsys
fi
date -u
