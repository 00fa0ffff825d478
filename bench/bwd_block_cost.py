#!/usr/bin/env python3
"""What a block (or tile) of an sm90 kernel costs beside what its steps cost: the split of the
idle tensor time that run 22d could not make (docs/perf-notes.md, "Run 22d").

The backward runs one block per (key tile, key/value head, batch) and one step per query tile
the block visits; the forward runs one tile per (query tile, head, batch) on a persistent grid
and one step per key tile. Either way the kernel's time is about

    t = a * steps / SMs + b * units / SMs

with a the cost of a step and b the cost of a unit (block or tile) beyond its steps: for the
backward, K_j and V_j loaded before the first step, dK and dV stored after the last, none of
them under another block's products; for the forward, the first key tile's lone S and
softmax, the last P~ V and the epilogue. Without a mask the steps are
B * H * (S_k / B_k) * (S_q / B_q): problems with the same S_q * S_k and B * H keep the steps
and move the units (backward: S_k up, S_q down; forward the other way). This script times such
a family and fits a and b by least squares; b * the units per SM of a problem is what hiding
the per-unit work could win there at most.

  python3 bench/bwd_block_cost.py --flashref build/flashref [--pass backward|forward] [--d 128]
      [--ncu ncu] [--out F]

Timing: by default `flashref bench` (the whole pass: the backward's preprocess and dQ
conversion too, whose cost follows S_q, so the fit takes a third term in S_q * H), each problem
--rounds times in a rotating order (the power cap moves the clock: run 21a). With --ncu, the
main kernel alone under Nsight Compute (clocks left alone), fitted in SM cycles so that the
clock's wander drops out. The fit ignores wave quantization (units / SMs is taken as a real
number).
"""
import argparse
import json
import re
import subprocess
import sys

import numpy as np

# The kernels' tiles (kernels/sm90/configs.hpp): backward (keys per block, queries per step),
# the fused kernels; forward (queries per tile, keys per step), the long-sequence kernels.
TILES = {"backward": {64: (128, 128), 128: (128, 64)},
         "forward": {64: (192, 112), 128: (128, 128)}}
KERNEL = {"backward": "bwd_dkdv", "forward": "fwd_wgmma"}


def ceil_div(a, b):
    return -(-a // b)


def bench_cmd(flashref, a, shape, reps, warmup):
    cmd = [flashref, "bench", "--backends", a.backend, "--shape", shape, "--mask", "none",
           "--dtype", a.dtype, "--reps", str(reps), "--warmup", str(warmup), "--json"]
    return cmd + (["--backward"] if a.pass_ == "backward" else [])


def bench(a, shape):
    out = subprocess.run(bench_cmd(a.flashref, a, shape, a.reps, 2), check=True,
                         capture_output=True, text=True).stdout
    rows = [r for r in json.loads(out) if r["pass"] == a.pass_]
    return rows[0]["median_ms"]


def ncu_cycles(a, shape):
    """The main kernel's SM cycles and duration (ms) under Nsight Compute, its last launch."""
    cmd = [a.ncu, "--clock-control", "none", "--kernel-name", f"regex:{KERNEL[a.pass_]}",
           "--launch-skip", "1", "--launch-count", "1", "--metrics",
           "sm__cycles_elapsed.max,gpu__time_duration.sum", "--csv", "--page", "raw"]
    out = subprocess.run(cmd + bench_cmd(a.flashref, a, shape, 1, 1), check=True,
                         capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith('"')]
    at = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    fields = [[c.strip('"').replace(",", "") for c in ln.split('","')]
              for ln in (lines[at], lines[at + 1], lines[-1])]
    val, unit = dict(zip(fields[0], fields[2])), dict(zip(fields[0], fields[1]))
    per_ns = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9,
              "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
    ns = float(val["gpu__time_duration.sum"]) * per_ns[unit["gpu__time_duration.sum"]]
    return float(val["sm__cycles_elapsed.max"]), ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashref", required=True, help="the flashref CLI")
    ap.add_argument("--pass", dest="pass_", default="backward", choices=sorted(TILES))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--d", type=int, default=128, choices=(64, 128))
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--area", type=int, default=2**28, help="S_q * S_k, kept by every problem")
    ap.add_argument("--lengths", "--keys", dest="lengths",
                    help="the moving length of each problem: S_k for the backward, S_q for the "
                         "forward (default: 17 to 264 units of the kernel's tile at H = 16)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ncu", help="Nsight Compute: time the main kernel alone, in SM cycles")
    ap.add_argument("--out")
    a = ap.parse_args()
    unit, step = TILES[a.pass_][a.d]
    lengths = ([int(x) for x in a.lengths.split(",")] if a.lengths else
               [unit * u for u in (17, 33, 66, 132, 264)])
    problems = []
    for moving in lengths:
        fixed = a.area // moving
        s_q, s_k = (fixed, moving) if a.pass_ == "backward" else (moving, fixed)
        units = a.heads * ceil_div(moving, unit)
        steps = units * ceil_div(fixed, step)
        problems.append(dict(S_q=s_q, S_k=s_k, units=units, steps=steps, ms=[], cycles=[]))
    for r in range(a.rounds):
        order = problems[r % len(problems):] + problems[:r % len(problems)]
        for p in order:
            shape = f"1,{a.heads},{p['S_q']},{p['S_k']},{a.d}"
            if a.ncu:
                cyc, ns = ncu_cycles(a, shape)
                p["cycles"].append(cyc)
                p["ms"].append(ns * 1e-6)
            else:
                p["ms"].append(bench(a, shape))
            print(f"{shape}: {p['ms'][-1]:.3f} ms" +
                  (f", {p['cycles'][-1]:.0f} cycles" if a.ncu else ""), file=sys.stderr, flush=True)
    cols = [[p["steps"] / a.sms for p in problems], [p["units"] / a.sms for p in problems]]
    if not a.ncu and a.pass_ == "backward":  # the preprocess and dQ conversion, per query row
        cols.append([a.heads * p["S_q"] / 1e6 for p in problems])
    x = np.array(cols).T
    y = np.array([np.median(p["cycles"] if a.ncu else p["ms"]) for p in problems])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    fit = x @ coef
    what = "cycles" if a.ncu else "ms"
    print(f"{'S_q':>7} {'S_k':>7} {'units':>7} {'steps':>9} {'median ' + what:>14} {'fit':>12}"
          + ("   median ms" if a.ncu else ""))
    for p, yi, fi in zip(problems, y, fit):
        print(f"{p['S_q']:7d} {p['S_k']:7d} {p['units']:7d} {p['steps']:9d} {yi:14.4g} "
              f"{fi:12.4g}" + (f"   {np.median(p['ms']):.3f}" if a.ncu else ""))
    unit_name = "block" if a.pass_ == "backward" else "tile"
    scale = 1.0 if a.ncu else 1e3
    unit_txt = "cycles" if a.ncu else "us"
    print(f"{a.pass_}, d = {a.d}, {a.sms} multiprocessors: a step {scale * coef[0]:.4g} "
          f"{unit_txt}; a {unit_name} beyond its steps {scale * coef[1]:.4g} {unit_txt}"
          + (f"; the preprocess and conversion {coef[2]:.4g} ms per million query rows"
             if len(coef) > 2 else ""))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(dict(pass_=a.pass_, d=a.d, sms=a.sms, ncu=bool(a.ncu),
                           coef=[float(c) for c in coef], problems=problems), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
