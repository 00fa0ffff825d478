#!/usr/bin/env python3
"""The table scripts/device-run prints last: our cuda backend (bench.jsonl, one line per
`flashref bench` run) beside PyTorch's backends (peers.json) on the same problems, same run.
  python3 bench/device_summary.py OUT_DIR
"""
import json
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    table = {}  # (config, impl) -> {pass: (ms, tflops)}
    order = []
    path = os.path.join(out, "bench.jsonl")
    if os.path.exists(path):
        for line in open(path):
            entry = json.loads(line)
            impl = "cuda" + (f" [{entry['tune']}]" if entry["tune"] else "")
            key = (entry["config"], impl)
            if key not in table:
                order.append(key)
            for row in entry["rows"]:
                table.setdefault(key, {})[row["pass"]] = (row["median_ms"], row["gflops"] / 1e3)
    peers = os.path.join(out, "peers.json")
    if os.path.exists(peers):
        for row in json.load(open(peers))["rows"]:
            if "error" in row:
                continue
            key = (row["config"], row["peer"])
            order.append(key)
            table[key] = {"forward": (row["fwd_ms"], row["fwd_tflops"]),
                          "backward": (row["bwd_ms"], row["bwd_tflops"]),
                          "forward+backward": (row["total_ms"], row["total_tflops"])}
    if not table:
        print("no benchmark results")
        return
    print(f"{'config':22s} {'implementation':18s} {'fwd ms':>8s} {'bwd ms':>8s} {'f+b ms':>8s}"
          f" {'fwd TF/s':>9s} {'f+b TF/s':>9s} {'f+b / FA2':>9s}")
    order.sort(key=lambda k: k[0])
    for config, impl in order:
        r = table[(config, impl)]
        flash = table.get((config, "flash"), {}).get("forward+backward")

        def ms(p):
            return f"{r[p][0]:8.3f}" if p in r else f"{'-':>8s}"

        def tf(p):
            return f"{r[p][1]:9.1f}" if p in r else f"{'-':>9s}"

        ratio = (f"{r['forward+backward'][0] / flash[0]:9.2f}"
                 if flash and "forward+backward" in r else f"{'-':>9s}")
        print(f"{config:22s} {impl:18s} {ms('forward')} {ms('backward')} {ms('forward+backward')}"
              f" {tf('forward')} {tf('forward+backward')} {ratio}")


if __name__ == "__main__":
    main()
