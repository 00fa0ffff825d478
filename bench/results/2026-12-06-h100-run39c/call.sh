#!/usr/bin/env bash
# Run 39c (2026-12-06): on an H200, the goal's table beside the peers on this commit (run 39b,
# on an H100, judged this build: the same bits as d879575, every suite passed); on any card, where
# d = 64's short forward at S = 1k spends its time, beside cuDNN's kernel on the same problem:
# Nsight Compute's source counters on our forward (stall samples per SASS instruction), then its
# speed-of-light, occupancy and warp-state sections on ours and on cuDNN's (bench/peer_kernels.py).
# Here: scripts/device-build; there: bash bench/results/2026-12-06-run39c/call.sh, carrying
# .device (timeout_s as the budget allows; each part is cut by its own timeout).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
[[ $gpu == *H200* ]] && goal_table $((SECONDS + 140))
export FLASHREF_PROFILE_SHAPES="32,16,1024,1024,64 --dtype bf16"
OUT=$OUT/source timeout 100 bash scripts/device-run profile-source >$OUT/profile-source.log 2>&1
echo "profile-source rc=$? ${SECONDS}s"
export FLASHREF_PROFILE_PEERS="cudnn 32,16,1024,64"
OUT=$OUT/profile timeout 150 bash scripts/device-run profile >$OUT/profile.log 2>&1
echo "profile rc=$? ${SECONDS}s"
ls -R $OUT | head -30
date -u
