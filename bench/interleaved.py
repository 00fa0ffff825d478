#!/usr/bin/env python3
"""Ours and PyTorch's peers timed in alternation, for comparisons that the card's power cap
does not bias. Under sustained load the H200's SM clock wanders between about 1.5 and 1.98 GHz
(run 21a: nvidia-smi every 100 ms, reason "SW power cap"), so two implementations timed in two
separate windows, as bench/peers.py and `flashref bench` time them, can differ by 10-15% with
nothing changed (run 21a timed flashref.attention twice per problem that way). Here every
implementation runs the same inputs in short bursts, taken in turn and in a rotating order, for
many rounds: each sees the same spread of clocks, and the median of its calls is compared.

Each call is timed as triton's do_bench times it (the L2 flushed before it, CUDA events around
it); FLOPs as FlashAttention counts them (forward 4*B*H*S_q*S_k*d, halved for causal; backward
2.5x). flashref runs through flashref.attention (the Python package on PYTHONPATH: the cuda
backend's defaults, the deterministic backward).

  PYTHONPATH=<flashref's package> python3 bench/interleaved.py [--configs leaderboard,...]
      [--rounds 16] [--burst-ms 15] [--out F]
Writes F (JSON: one row per problem and implementation, peers.json's fields plus the spread)
and prints the goal's table: ours over cuDNN (float32: the memory-efficient kernel) and FA2.
"""
import argparse
import json
import os
import statistics

import torch

from peers import CONFIGS, PEERS, flashref_attention, flops_forward

PASSES = ("fwd", "bwd", "total")


def callables(fn, q, k, v, do, causal):
    """The three passes of one implementation on the shared inputs."""
    o = fn(q, k, v, causal)

    def both():
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v, causal).backward(do)

    return {"fwd": lambda: fn(q, k, v, causal),
            "bwd": lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
            "total": both}


def timed_calls(f, n, flush):
    """n calls of f, each after an L2 flush, timed by events; ms per call."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(n)]
    for start, end in ev:
        flush.zero_()
        start.record()
        f()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in ev]


def measure_problem(name, impls, rounds, burst_ms, flush):
    b, h, s, d, dtype, causal, _ = CONFIGS[name]
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)
    calls = {impl: callables(PEERS[impl], q, k, v, do, causal) for impl in impls}
    times = {impl: {p: [] for p in PASSES} for impl in impls}
    for p in PASSES:
        # Calls per burst from a first estimate; the first round warms up and is dropped.
        n = {}
        for impl in impls:
            est = statistics.median(timed_calls(calls[impl][p], 3, flush))
            n[impl] = max(1, round(burst_ms / max(est, 1e-3)))
        for r in range(rounds + 1):
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            for impl in order:
                t = timed_calls(calls[impl][p], n[impl], flush)
                if r > 0:
                    times[impl][p] += t
    f = flops_forward(b, h, s, d, causal)
    rows = []
    for impl in impls:
        row = dict(config=name, peer=impl, b=b, h=h, s=s, d=d, dtype=str(dtype).split(".")[-1],
                   causal=causal, harness="interleaved", rounds=rounds)
        for p in PASSES:
            ts = sorted(times[impl][p])
            row[f"{p}_ms"] = statistics.median(ts)
            row[f"{p}_p10_ms"] = ts[len(ts) // 10]
            row[f"{p}_p90_ms"] = ts[(9 * len(ts)) // 10]
            row[f"{p}_calls"] = len(ts)
        row.update(fwd_tflops=f / row["fwd_ms"] / 1e9, bwd_tflops=2.5 * f / row["bwd_ms"] / 1e9,
                   total_tflops=3.5 * f / row["total_ms"] / 1e9)
        rows.append(row)
        print(f"{name:22s} {impl:9s} fwd {row['fwd_ms']:8.3f}  bwd {row['bwd_ms']:8.3f}  "
              f"f+b {row['total_ms']:8.3f} ms  ({row['total_tflops']:6.1f} TFLOP/s)", flush=True)
    del calls
    torch.cuda.empty_cache()
    return rows


def table(rows):
    by = {(r["config"], r["peer"]): r for r in rows}
    lines = ["| problem | flashref fwd / bwd / f+b ms | cuDNN (float32: memory-efficient) | FA2 "
             "| ours / cuDNN: fwd / bwd / f+b | ours / FA2 f+b |", "|---|---|---|---|---|---|"]
    for c in dict.fromkeys(r["config"] for r in rows):
        ours = by.get((c, "flashref"))
        peer = by.get((c, "cudnn")) or by.get((c, "efficient"))
        fa2 = by.get((c, "flash"))
        if ours is None:
            continue
        cell = lambda r: " / ".join(f"{r[p + '_ms']:.3f}" for p in PASSES) if r else "-"
        ratio = " / ".join(f"{ours[p + '_ms'] / peer[p + '_ms']:.3f}" for p in PASSES) if peer else "-"
        lines.append(f"| {c} | {cell(ours)} | {cell(peer)} | {cell(fa2)} | {ratio} | "
                     + (f"{ours['total_ms'] / fa2['total_ms']:.3f} |" if fa2 else "- |"))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="leaderboard,leaderboard128,leaderboard-noncausal")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--burst-ms", type=float, default=15.0)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "interleaved.json"))
    args = ap.parse_args()
    PEERS["flashref"] = flashref_attention()
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    for name in args.configs.split(","):
        if name not in CONFIGS:
            raise SystemExit(f"interleaved.py: unknown config '{name}'")
        # The peers of the goal: cuDNN and FA2 for bf16/f16, the memory-efficient kernel (3xTF32)
        # for float32, which neither of the others runs.
        peers = ["efficient"] if CONFIGS[name][4] == torch.float32 else ["cudnn", "flash"]
        rows += measure_problem(name, ["flashref"] + peers, args.rounds, args.burst_ms, flush)
        # Written after every problem, so that a call cut off by its time limit keeps the
        # problems it finished.
        with open(args.out, "w") as fh:
            json.dump(dict(meta=dict(torch=torch.__version__, device=torch.cuda.get_device_name(),
                                     rounds=args.rounds, burst_ms=args.burst_ms), rows=rows),
                      fh, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
