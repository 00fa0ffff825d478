#!/usr/bin/env python3
"""flashref.attention under torch.compile on the course's leaderboard problem (bf16, causal,
B=1, H=16, S=16384, d=64): forward and forward+backward medians of triton.testing.do_bench,
eager and compiled (fullgraph), so the Python layer's overhead can be read against `flashref
bench` on the same problem (scripts/device-run python prints both). Writes --out (JSON)."""

import argparse
import json

import torch
import triton

import flashref


def flops(B, H, S, d, causal):
    fwd = 4 * B * H * S * S * d / (2 if causal else 1)
    return fwd, fwd * 3.5  # forward, forward + backward (backward = 2.5 x forward)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,16,16384,64", help="B,H,S,d")
    ap.add_argument("--rep-ms", type=int, default=300)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    B, H, S, d = (int(x) for x in a.shape.split(","))
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)

    def forward(fn):
        with torch.no_grad():
            return triton.testing.do_bench(lambda: fn(q, k, v), warmup=25, rep=a.rep_ms,
                                           return_mode="median")

    def forward_backward(fn):
        return triton.testing.do_bench(lambda: fn(q, k, v).backward(do), warmup=25, rep=a.rep_ms,
                                       grad_to_none=[q, k, v], return_mode="median")

    def eager(q, k, v):
        return flashref.attention(q, k, v, is_causal=True)

    compiled = torch.compile(eager, fullgraph=True)
    f_fwd, f_both = flops(B, H, S, d, True)
    rows = []
    for name, fn in (("eager", eager), ("torch.compile", compiled)):
        fwd, both = forward(fn), forward_backward(fn)
        rows.append({"name": f"flashref.attention {name}", "fwd_ms": fwd, "fwd_bwd_ms": both,
                     "fwd_tflops": f_fwd / fwd / 1e9, "fwd_bwd_tflops": f_both / both / 1e9})
        print(f"{rows[-1]['name']:34} fwd {fwd:8.3f} ms  fwd+bwd {both:8.3f} ms  "
              f"({rows[-1]['fwd_bwd_tflops']:.0f} TFLOP/s)")
    # The output is right, not only fast.
    with torch.no_grad():
        small = [x[:, :, :2048].detach() for x in (q, k, v)]
        report = flashref.check(*small, o=compiled(*small), mask="causal")
    print("check of the compiled output on S=2048:", "PASS" if report.passed else "FAIL")
    with open(a.out, "w") as f:
        json.dump({"shape": [B, H, S, d], "dtype": "bf16", "mask": "causal", "rows": rows,
                   "checked": report.passed, "torch": torch.__version__,
                   "device": torch.cuda.get_device_name()}, f, indent=1)


if __name__ == "__main__":
    main()
