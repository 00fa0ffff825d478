#!/usr/bin/env bash
# There (the GPU machine): the dev/sm90 experiments, checked then timed, and PyTorch's
# forward peers on the same problems in the same call. Binaries come built from here in
# .device/dev-sm90/ (dev/sm90/build.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/.device/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv 2>&1 | tee "$out/sm90.log"
for exe in "$root"/.device/dev-sm90/*; do
  echo "### $exe" | tee -a "$out/sm90.log"
  timeout 300 "$exe" 2>&1 | tee -a "$out/sm90.log"
done
[[ ${SKIP_PEERS:-0} == 1 ]] && exit 0
echo "### peers (forward times are the fwd column)" | tee -a "$out/sm90.log"
timeout 240 python3 "$root/bench/peers.py" --configs leaderboard,leaderboard128,leaderboard-noncausal \
  --rep-ms 200 --out "$out/peers-sm90.json" 2>&1 | tail -n 25 | tee -a "$out/sm90.log"
