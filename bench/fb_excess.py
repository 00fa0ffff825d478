#!/usr/bin/env python3
"""Where our forward+backward's time beyond the sum of its passes goes (the "excess": run 34b,
the leaderboard at d = 128, 6.790 ms against 1.710 + 4.859, where cuDNN's is 0.05 ms; it
decides that problem's goal). interleaved.py times three calls: the forward, the backward
(torch.autograd.grad of a retained graph) and both (forward, then .backward() into .grad),
each after an L2 flush. This splits the third with an event between its passes, times the
backward after a flush that follows a fresh forward, and lists each call's kernels with their
device times and the idle time between them (torch.profiler), for flashref and a peer, in
alternation as interleaved.py does.

  PYTHONPATH=<flashref's package> python3 bench/fb_excess.py [--configs leaderboard128,...]
      [--peers cudnn] [--rounds 8] [--out F]

Rows (medians over the rounds, ms):
  fwd, bwd, total      interleaved.py's three calls
  total.fwd, total.bwd the total call split by an event after the forward returns
  fwd+grad             the total call with torch.autograd.grad in place of .backward()
                       (nothing accumulated into .grad)
  bwd.after_fwd        a backward run right after a forward, the L2 flushed between them
What the profile adds, per call kind: the sum of kernel times, the span from the first
kernel's start to the last's end, and the gaps (span minus the union of the kernels), with
the kernels by name. If the excess is the backward running slower after the forward, total.bwd
exceeds bwd and the profile names the kernel; if it is the host, the gaps grow; if it is work
the others do not do (a copy into .grad), the total call has kernels the passes do not.
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import CONFIGS, PEERS, flashref_attention  # noqa: E402


def inputs(name):
    b, h, s, d, dtype, causal, _ = CONFIGS[name]
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    return q, k, v, torch.randn_like(q), causal


def event():
    return torch.cuda.Event(enable_timing=True)


def timed(fn, q, k, v, do, causal, flush, n):
    """n of each call kind, each after an L2 flush; returns {kind: [ms, ...]}."""
    kinds = ("fwd", "bwd", "total", "fwd+grad", "bwd.after_fwd")
    out = {key: [] for key in kinds + ("total.fwd", "total.bwd")}
    o = fn(q, k, v, causal)
    for _ in range(n):
        rec = {}
        for kind in kinds:
            flush.zero_()
            e = [event() for _ in range(3)]
            if kind == "total":
                for t in (q, k, v):
                    t.grad = None
                e[0].record()
                y = fn(q, k, v, causal)
                e[1].record()
                y.backward(do)
                e[2].record()
                rec[kind] = e
                continue
            if kind == "bwd.after_fwd":
                y = fn(q, k, v, causal)
                flush.zero_()
            e[0].record()
            if kind == "fwd":
                fn(q, k, v, causal)
            elif kind == "bwd":
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            elif kind == "fwd+grad":
                torch.autograd.grad(fn(q, k, v, causal), (q, k, v), do)
            else:
                torch.autograd.grad(y, (q, k, v), do)
            e[1].record()
            rec[kind] = e
        torch.cuda.synchronize()
        for kind, e in rec.items():
            out[kind].append(e[0].elapsed_time(e[1]))
            if kind == "total":
                out["total.fwd"].append(e[0].elapsed_time(e[1]))
                out["total.bwd"].append(e[1].elapsed_time(e[2]))
                out["total"][-1] = e[0].elapsed_time(e[2])
    return out


def profiled(fn, q, k, v, do, causal, flush, reps):
    """Kernels of each call kind under torch.profiler: per kind, the kernels' summed device
    time, the span they cover, the idle time inside it, and the kernels by name (mean us)."""
    from torch.profiler import ProfilerActivity, profile
    o = fn(q, k, v, causal)
    kinds = {
        "fwd": lambda: fn(q, k, v, causal),
        "bwd": lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
        "total": lambda: fn(q, k, v, causal).backward(do),
    }
    result = {}
    for kind, call in kinds.items():
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                flush.zero_()
                torch.cuda.synchronize()  # each call alone on the device: its span is its own
                for t in (q, k, v):
                    t.grad = None
                call()
                torch.cuda.synchronize()
        # Each call follows its flush (a fill of int8s); every other device event between one
        # flush and the next is the call's.
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        is_flush = lambda e: "FillFunctor<signed char>" in e.name  # noqa: E731
        flushes = sorted((e.time_range.start, e.time_range.end) for e in kernels if is_flush(e))
        calls = []
        for i, (_, f_end) in enumerate(flushes):
            nxt = flushes[i + 1][0] if i + 1 < len(flushes) else float("inf")
            ks = sorted((e.time_range.start, e.time_range.end, e.name) for e in kernels
                        if f_end <= e.time_range.start < nxt and not is_flush(e))
            if not ks:
                continue
            busy, last = 0.0, ks[0][0]
            for s, e, _ in ks:
                s = max(s, last)
                if e > s:
                    busy += e - s
                    last = e
            span = max(e for _, e, _ in ks) - ks[0][0]
            calls.append(dict(kernel_us=sum(e - s for s, e, _ in ks), span_us=span,
                              idle_us=span - busy, names=[(n, e - s) for s, e, n in ks]))
        by_name = {}
        for c in calls:
            for n, us in c["names"]:
                by_name.setdefault(n[:110], []).append(us)
        result[kind] = dict(
            calls=len(calls),
            kernel_us=statistics.median(c["kernel_us"] for c in calls) if calls else None,
            span_us=statistics.median(c["span_us"] for c in calls) if calls else None,
            idle_us=statistics.median(c["idle_us"] for c in calls) if calls else None,
            kernels={n: (len(v) / max(len(calls), 1), statistics.median(v))
                     for n, v in by_name.items()})
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="leaderboard128,leaderboard")
    ap.add_argument("--peers", default="cudnn")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3, help="calls of each kind a round")
    ap.add_argument("--profile-reps", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "fb_excess.json"))
    args = ap.parse_args()
    PEERS["flashref"] = flashref_attention()
    impls = ["flashref"] + args.peers.split(",")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    report = {}
    for name in args.configs.split(","):
        q, k, v, do, causal = inputs(name)
        for impl in impls:  # warm-up: plans, workspaces, the allocator's cache
            timed(PEERS[impl], q, k, v, do, causal, flush, 1)
        times = {impl: {} for impl in impls}
        for r in range(args.rounds):
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            for impl in order:
                for kind, ts in timed(PEERS[impl], q, k, v, do, causal, flush, args.reps).items():
                    times[impl].setdefault(kind, []).extend(ts)
        report[name] = {}
        for impl in impls:
            med = {kind: statistics.median(ts) for kind, ts in times[impl].items()}
            med["excess"] = med["total"] - med["fwd"] - med["bwd"]
            row = dict(medians=med)
            try:
                row["profile"] = profiled(PEERS[impl], q, k, v, do, causal, flush,
                                          args.profile_reps)
            except Exception as e:  # no CUPTI: the events alone still say where it goes
                row["profile_error"] = repr(e)[:300]
            report[name][impl] = row
            print(f"{name} {impl}: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()),
                  flush=True)
            for kind, p in row.get("profile", {}).items():
                print(f"  profile {kind}: {p['calls']} calls, kernels {p['kernel_us']:.1f} us, "
                      f"span {p['span_us']:.1f}, idle {p['idle_us']:.1f}" if p["calls"] else
                      f"  profile {kind}: no calls found", flush=True)
                for n, (per_call, us) in sorted(p["kernels"].items(), key=lambda x: -x[1][1]):
                    print(f"    {per_call:4.1f} x {us:9.1f} us  {n}")
        with open(args.out, "w") as fh:
            json.dump(dict(meta=dict(torch=torch.__version__, device=torch.cuda.get_device_name(),
                                     rounds=args.rounds, reps=args.reps), report=report),
                      fh, indent=1)


if __name__ == "__main__":
    main()
