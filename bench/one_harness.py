#!/usr/bin/env python3
"""The goal's table from one harness: bench/peers.py --flashref times flashref.attention with
the same function as PyTorch's peers (triton's do_bench medians, the same warm-up, in the same
process), once before each problem's peers and once after them. Prints, per problem, ours
(before / after) beside cuDNN (float32: the memory-efficient kernel) and FlashAttention-2, and
the ratios the goal is stated in, taken from the slower of our two timings of each pass.

  python3 bench/one_harness.py bench/results/<run>/peers.json
"""
import argparse
import json


def ratio_cells(ours, peer):
    return " / ".join(f"{ours[k] / peer[k]:.3f}" for k in ("fwd_ms", "bwd_ms", "total_ms"))


def times(row):
    return f"{row['fwd_ms']:.3f} / {row['bwd_ms']:.3f} / {row['total_ms']:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peers_json")
    a = ap.parse_args()
    with open(a.peers_json) as f:
        rows = [r for r in json.load(f)["rows"] if "error" not in r]
    by = {}
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
        by[(r["config"], r["peer"])] = r
    print("| problem | ours, before the peers | ours, after | cuDNN (float32: memory-efficient) "
          "| FA2 | ours / peer: fwd / bwd / f+b (slower of ours) | ours / FA2 f+b |")
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        first, after = by.get((c, "flashref")), by.get((c, "flashref-after"))
        if first is None or after is None:
            continue
        slower = {k: max(first[k], after[k]) for k in ("fwd_ms", "bwd_ms", "total_ms")}
        peer = by.get((c, "cudnn")) or by.get((c, "efficient"))
        fa2 = by.get((c, "flash"))
        cells = [c, times(first), times(after), times(peer) if peer else "-",
                 f"{fa2['total_ms']:.3f}" if fa2 else "-",
                 ratio_cells(slower, peer) if peer else "-",
                 f"{slower['total_ms'] / fa2['total_ms']:.3f}" if fa2 else "-"]
        print("| " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
