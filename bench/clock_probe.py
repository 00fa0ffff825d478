#!/usr/bin/env python3
"""The SM clock and board power each implementation runs at under sustained load: ours and
PyTorch's peers take turns running one pass back to back for a few seconds while nvidia-smi
samples the card every 50 ms. Why: Nsight Compute times a kernel alone, at the clock a cool
card boosts to, and there our d = 128 backward at S = 8k took 0.955x cuDNN's kernel time (run
41c), where bench/interleaved.py, in bursts under the power cap, measured 0.987x. If ours draws
more power for the same work, the cap lowers its clock more, and that shows here.

  PYTHONPATH=<flashref's package> python3 bench/clock_probe.py [--shape 4,16,8192,128]
      [--impls flashref,cudnn] [--pass bwd] [--seconds 2] [--rounds 3] [--flush] [--idle-ms 0]
Prints one line per turn: the median of its calls' times (CUDA events around each call), the
median SM clock (MHz) and power (W) of the samples taken after its first half second; then each
implementation's medians over its turns. --flush and --idle-ms bring it nearer
bench/interleaved.py's conditions, one at a time.
"""
import argparse
import datetime
import statistics
import subprocess
import time

import torch

from peers import PEERS, flashref_attention


def samples(lines):
    """(epoch seconds, SM MHz, W) from nvidia-smi's csv,noheader,nounits lines."""
    out = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            out.append((stamp.timestamp(), float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4,16,8192,128", help="B,H,S,d (bf16, causal)")
    ap.add_argument("--impls", default="flashref,cudnn")
    ap.add_argument("--pass", dest="which", default="bwd", choices=("fwd", "bwd"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flush", action="store_true",
                    help="zero a 256 MB buffer before each call, as bench/interleaved.py does")
    ap.add_argument("--idle-ms", type=float, default=0.0,
                    help="the card left idle this long after every 5 calls (a lower duty cycle)")
    args = ap.parse_args()
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    PEERS["flashref"] = flashref_attention()
    impls = args.impls.split(",")
    b, h, s, d = (int(x) for x in args.shape.split(","))
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)
    outs = {impl: PEERS[impl](q, k, v, True) for impl in impls}

    def call(impl):
        if args.which == "fwd":
            return PEERS[impl](q, k, v, True)
        return torch.autograd.grad(outs[impl], (q, k, v), do, retain_graph=True)

    for impl in impls:  # warm-up: plans, workspaces
        for _ in range(3):
            call(impl)
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                            "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    turns = []
    for r in range(args.rounds):
        order = impls[r % len(impls):] + impls[:r % len(impls)]
        for impl in order:
            t0, times = time.time(), []
            while time.time() - t0 < args.seconds:
                events = []
                for _ in range(5):
                    if args.flush:
                        flush.zero_()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                        enable_timing=True)
                    start.record()
                    call(impl)
                    end.record()
                    events.append((start, end))
                torch.cuda.synchronize()
                times += [start.elapsed_time(end) for start, end in events]
                if args.idle_ms > 0:
                    time.sleep(args.idle_ms / 1e3)
            t1 = time.time()
            turns.append((impl, t0, t1, statistics.median(times)))
            time.sleep(0.2)
    smi.terminate()
    got = samples(smi.communicate()[0].splitlines())
    per_impl = {impl: [] for impl in impls}
    for impl, t0, t1, ms in turns:
        inside = [(mhz, w) for t, mhz, w in got if t0 + 0.5 <= t <= t1]
        mhz = statistics.median(x[0] for x in inside) if inside else float("nan")
        w = statistics.median(x[1] for x in inside) if inside else float("nan")
        per_impl[impl].append((ms, mhz, w))
        print(f"{impl:9s} {args.which} {ms:8.3f} ms a call  SM {mhz:6.0f} MHz  {w:6.1f} W  "
              f"({len(inside)} samples)", flush=True)
    for impl, rows in per_impl.items():
        print(f"{impl:9s} medians over {len(rows)} turns: "
              f"{statistics.median(r[0] for r in rows):8.3f} ms, "
              f"SM {statistics.median(r[1] for r in rows):6.0f} MHz, "
              f"{statistics.median(r[2] for r in rows):6.1f} W")


if __name__ == "__main__":
    main()
