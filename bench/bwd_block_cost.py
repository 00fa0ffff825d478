#!/usr/bin/env python3
"""What a block of the sm90 dK/dV backward costs beside what its steps cost: the split of the
idle tensor time that run 22d could not make (docs/perf-notes.md, "Run 22d"). The backward
runs one block per (key tile, key/value head, batch) and one step per query tile the block
visits, so its time is about

    t = a * steps / SMs + b * blocks / SMs

with a the cost of a step and b the cost of a block beyond its steps (K_j and V_j loaded
before the first step, dK and dV stored after the last, none of them under another block's
products). Without a mask the steps are B * H * (S_k / B_k) * (S_q / B_q): problems with the
same S_q * S_k and B * H keep the steps and move the blocks (S_k up, S_q down). This script
times such a family with `flashref bench --backward` and fits a and b by least squares; b * the
leaderboard's blocks per SM is what a persistent grid could win there at most.

  python3 bench/bwd_block_cost.py --flashref build/flashref [--d 128] [--out F]

Each problem is timed --rounds times, in a rotating order (the power cap moves the clock: run
21a). The fit ignores wave quantization (blocks / SMs is taken as a real number), so families
whose block counts are whole multiples of the SM count fit best.
"""
import argparse
import json
import subprocess
import sys

import numpy as np

# The fused kernels' tiles (kernels/sm90/configs.hpp): keys per block, queries per step.
TILES = {64: (128, 128), 128: (128, 64)}


def bench(flashref, shape, dtype, reps, backend):
    cmd = [flashref, "bench", "--backends", backend, "--shape", shape, "--mask", "none",
           "--dtype", dtype, "--backward", "--reps", str(reps), "--warmup", "2", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [r for r in json.loads(out) if r["pass"] == "backward"]
    return rows[0]["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashref", required=True, help="the flashref CLI")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--d", type=int, default=128, choices=sorted(TILES))
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--area", type=int, default=2**28, help="S_q * S_k, kept by every problem")
    ap.add_argument("--keys", default="2112,4224,8448,16896,33792",
                    help="S_k of each problem (default: 264 to 4,224 blocks at H = 16 and "
                         "B_k = 128, whole multiples of 132)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    block_n, block_m = TILES[a.d]
    problems = []
    for s_k in (int(x) for x in a.keys.split(",")):
        s_q = a.area // s_k
        blocks = a.heads * -(-s_k // block_n)
        steps = blocks * -(-s_q // block_m)
        problems.append(dict(S_q=s_q, S_k=s_k, blocks=blocks, steps=steps, ms=[]))
    for r in range(a.rounds):
        order = problems[r % len(problems):] + problems[:r % len(problems)]
        for p in order:
            shape = f"1,{a.heads},{p['S_q']},{p['S_k']},{a.d}"
            p["ms"].append(bench(a.flashref, shape, a.dtype, a.reps, a.backend))
    t = np.array([np.median(p["ms"]) for p in problems])
    x = np.array([[p["steps"] / a.sms, p["blocks"] / a.sms] for p in problems])
    (step_ms, block_ms), *_ = np.linalg.lstsq(x, t, rcond=None)
    fit = x @ np.array([step_ms, block_ms])
    print(f"{'S_q':>7} {'S_k':>7} {'blocks':>7} {'steps':>9} {'median ms':>10} {'fit ms':>8}")
    for p, ti, fi in zip(problems, t, fit):
        print(f"{p['S_q']:7d} {p['S_k']:7d} {p['blocks']:7d} {p['steps']:9d} {ti:10.3f} {fi:8.3f}")
    print(f"a step: {1e3 * step_ms:.3f} us; a block beyond its steps: {1e3 * block_ms:.3f} us "
          f"(d = {a.d}, {a.sms} multiprocessors)")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(dict(d=a.d, sms=a.sms, step_us=1e3 * step_ms, block_us=1e3 * block_ms,
                           problems=problems), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
