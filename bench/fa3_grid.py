#!/usr/bin/env python3
"""FlashAttention-3's benchmark grid (B * S = 32k, H = 16, bf16, causal, d = 64 and 128) from one
device run: ours and the peers of the same call, either from bench/interleaved.py's
interleaved.json (every implementation timed in alternation, the fairest harness on this card:
docs/perf-notes.md, run 21) or from scripts/device-run's bench.jsonl (`flashref bench` rows
fa3grid-s<S>-d<d>) beside bench/peers.py's peers.json. Prints a markdown table of
forward / backward / forward+backward ms and TFLOP/s, and with --plot FILE draws TFLOP/s
(forward+backward) against S.

  python3 bench/fa3_grid.py bench/results/2026-12-03-h200-run22c [--plot fa3-grid.png]
"""
import argparse
import json
import os


def load_interleaved(path):
    ours, peers = {}, {}
    with open(path) as f:
        for r in json.load(f)["rows"]:
            if not r["config"].startswith("fa3grid"):
                continue
            t = {"fwd": r["fwd_ms"], "bwd": r["bwd_ms"], "total": r["total_ms"]}
            if r["peer"] == "flashref":
                # FlashAttention's count: 4 B H S^2 d, halved for the causal mask.
                t["flops"] = 4 * r["b"] * r["h"] * r["s"] * r["s"] * r["d"] / (2 if r["causal"] else 1)
                ours[r["config"]] = t
            else:
                peers[(r["config"], r["peer"])] = t
    return ours, peers


def load(run_dir):
    interleaved = os.path.join(run_dir, "interleaved.json")
    if os.path.exists(interleaved):
        return load_interleaved(interleaved)
    ours = {}
    with open(os.path.join(run_dir, "bench.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if not r["config"].startswith("fa3grid") or r.get("tune"):
                continue
            by_pass = {x["pass"]: x for x in r["rows"]}
            ours[r["config"]] = {
                "fwd": by_pass["forward"]["median_ms"], "bwd": by_pass["backward"]["median_ms"],
                "total": by_pass["forward+backward"]["median_ms"],
                "flops": by_pass["forward"]["flops"]}
    peers = {}
    with open(os.path.join(run_dir, "peers.json")) as f:
        for r in json.load(f)["rows"]:
            if r["config"].startswith("fa3grid"):
                peers[(r["config"], r["peer"])] = {"fwd": r["fwd_ms"], "bwd": r["bwd_ms"],
                                                   "total": r["total_ms"]}
    return ours, peers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--plot", help="write a PNG of forward+backward TFLOP/s against S")
    a = ap.parse_args()
    ours, peers = load(a.run_dir)
    sizes = sorted({int(k.split("-s")[1].split("-")[0]) for k in ours})
    print("| d | S | B | flashref fwd / bwd / f+b ms | FA2 fwd / bwd / f+b ms | cuDNN fwd / bwd / f+b ms "
          "| f+b TFLOP/s: flashref / FA2 / cuDNN |")
    print("|---|---|---|---|---|---|---|")
    series = {}
    for d in (64, 128):
        for s in sizes:
            key = f"fa3grid-s{s}-d{d}"
            if key not in ours:
                continue
            o = ours[key]
            total_flops = o["flops"] * 3.5  # backward counted as 2.5x the forward
            cells, tf = [], []
            for name, t in (("flashref", o), ("flash", peers.get((key, "flash"))),
                            ("cudnn", peers.get((key, "cudnn")))):
                if t is None:
                    cells.append("-")
                    tf.append("-")
                    continue
                cells.append(f"{t['fwd']:.3f} / {t['bwd']:.3f} / {t['total']:.3f}")
                tflops = total_flops / t["total"] / 1e9
                tf.append(f"{tflops:.0f}")
                series.setdefault((name, d), []).append((s, tflops))
            print(f"| {d} | {s} | {32768 // s} | " + " | ".join(cells) + " | " + " / ".join(tf) + " |")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, d in zip(axes, (64, 128)):
            for name, label in (("flashref", "flashref (sm90)"), ("flash", "FA2 (SDPA flash)"),
                                ("cudnn", "cuDNN")):
                pts = series.get((name, d), [])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_title(f"bf16, causal, H=16, B*S=32k, d={d}")
            ax.set_xlabel("S")
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("forward+backward TFLOP/s")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
