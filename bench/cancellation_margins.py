#!/usr/bin/env python3
"""How much of the rule's cancellation floor correct backends use (docs/verification.md,
"The cancellation floor"): runs `flashref verify --json` on the shape that stresses it most
(d = 1, one element per row; causal bottom-right so rows of every length occur; float32 by
default, or the 16-bit dtypes, whose P~ rounding the noise part covers) over many seeds and
reports, per tensor:

  without  cases that fail with the term left out (err > k * baseline + rounding + noise)
  used     max over cases of (err - (k * baseline + rounding + noise)) / cancellation term:
           the share of the term a correct kernel needed (> 1 would fail)
  ratio    max err / limit with the term

  bench/cancellation_margins.py [--bin build/flashref] [--cases 500] [--first-seed 1]
                                [--dtype f32] [--tile 0,15] [--mask causal-bottom-right]
"""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/flashref")
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--shapes", default="1,1,1,37,1;1,1,40,40,1;1,2,33,29,1;1,1,64,64,2")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--tile", default="0,15")
    ap.add_argument("--mask", default="causal-bottom-right")
    args = ap.parse_args()
    shapes = args.shapes.split(";")
    stats = {}
    failures = []
    for n in range(args.cases):
        seed = args.first_seed + n
        shape = shapes[n % len(shapes)]
        cmd = [args.bin, "verify", "--backends", args.backends, "--shape", shape,
               "--mask", args.mask, "--dtype", args.dtype, "--tile", args.tile,
               "--seed", str(seed), "--layout", "bhsd", "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode not in (0, 1):
            print("error:", " ".join(cmd), r.stderr, file=sys.stderr)
            return 2
        j = json.loads(r.stdout)
        for b in j["backends"]:
            for t in b["tensors"]:
                key = (b["name"], t["tensor"])
                s = stats.setdefault(key, {"cases": 0, "without": 0, "used": 0.0, "ratio": 0.0})
                s["cases"] += 1
                base = t["k"] * t["baseline_err"] + t["floor_rounding"] + t["floor_noise"]
                if t["candidate_err"] > base:
                    s["without"] += 1
                    if t["floor_cancellation"] > 0:
                        s["used"] = max(s["used"],
                                        (t["candidate_err"] - base) / t["floor_cancellation"])
                s["ratio"] = max(s["ratio"], t["ratio"])
                if not t["pass"]:
                    failures.append(j["command"])
    print("| backend | tensor | cases | fail without the term | max share of the term used "
          "| max err / limit |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (backend, tensor), s in sorted(stats.items()):
        print(f"| {backend} | {tensor} | {s['cases']} | {s['without']} | {s['used']:.3f} "
              f"| {s['ratio']:.3f} |")
    for f in sorted(set(failures)):
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
