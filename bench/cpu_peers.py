#!/usr/bin/env python3
"""PyTorch's CPU attention on the problem of `flashref bench --sweep cpu-peer` (float32, B=1,
H=8, S=2048, d=64, causal), in the same run as ours: SDPA (its CPU flash-attention kernel)
and a naive matmul-softmax-matmul, timed as the peers of docs/benchmarks.md are: forward, then o.sum().backward(),
the median of --reps after one warm-up, at each thread count. Prints one JSON array.

  python3 bench/cpu_peers.py [--threads 2,16] [--reps 5] [--out F]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

B, H, S, D = 1, 8, 2048, 64


def naive(q, k, v):
    s = q @ k.transpose(-2, -1) / D**0.5
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def time_one(fn, reps):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, generator=gen, requires_grad=True) for _ in range(3))
    fwd, bwd = [], []
    for i in range(reps + 1):  # the first is the warm-up
        for t in (q, k, v):
            t.grad = None
        t0 = time.perf_counter()
        o = fn(q, k, v)
        t1 = time.perf_counter()
        o.sum().backward()
        t2 = time.perf_counter()
        if i > 0:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
    return statistics.median(fwd), statistics.median(bwd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="2,16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        for name, fn in (("sdpa", sdpa), ("naive", naive)):
            f, b = time_one(fn, a.reps)
            rows.append({"impl": name, "threads": threads, "forward_ms": round(f, 3),
                         "backward_ms": round(b, 3), "torch": torch.__version__})
            print(f"threads {threads:2d}  {name:5s}  forward {f:8.2f} ms  backward {b:8.2f} ms",
                  flush=True)
    text = json.dumps(rows, indent=1)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
