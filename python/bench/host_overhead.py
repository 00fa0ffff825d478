#!/usr/bin/env python3
"""The host time of one flashref.attention call, by layer, beside PyTorch's cuDNN SDPA: on a
problem small enough that the GPU waits for the host (B=1, H=16, S=128, d=64, bf16, causal),
the wall time of N calls without a synchronization between them is the host's time per call.
Where a kernel is shorter than that (FlashAttention-3's grid at S = 1k: 0.2 ms), a timed call
measures the host, not the kernel (run 21b). The layers: flashref.attention (called eagerly it
calls _core itself; its custom op serves torch.compile and other tracers), the custom op
called directly, and _core given tensors (nanobind calls each one's Tensor.__dlpack__) or
DLPack capsules (as flashref.attention hands them over). Prints microseconds per call and a
cProfile of the forward+backward; writes --out (JSON).

  PYTHONPATH=<flashref's package> python3 python/bench/host_overhead.py --out F
"""
import argparse
import cProfile
import io
import json
import pstats
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.dlpack import to_dlpack

import flashref
from flashref import _core


def per_call_us(fn, n):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return 1e6 * host / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,16,128,64", help="B,H,S,d")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    B, H, S, d = (int(x) for x in a.shape.split(","))
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    qd, kd, vd = q.detach(), k.detach(), v.detach()

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def ours():
        return flashref.attention(q, k, v, is_causal=True)

    def ours_no_grad():
        with torch.no_grad():
            return flashref.attention(q, k, v, is_causal=True)

    def op_direct():
        return torch.ops.flashref.attention_forward(qd, kd, vd, "causal", d ** -0.5, True)

    def core_direct():
        _core.attention_forward(qd, kd, vd, o, lse, "causal", d ** -0.5, stream, False)

    def core_capsules():
        # As flashref.attention hands tensors over: DLPack capsules, not Tensor.__dlpack__.
        _core.attention_forward(*(to_dlpack(t) for t in (qd, kd, vd, o, lse)), "causal",
                                d ** -0.5, stream, False)

    def both(fn):
        def run():
            for t in (q, k, v):
                t.grad = None
            fn().backward(do)
        return run

    rows = {}
    for name, fn in (("cuDNN SDPA forward", cudnn), ("flashref.attention forward", ours),
                     ("flashref.attention forward, no_grad", ours_no_grad),
                     ("torch.ops.flashref.attention_forward", op_direct),
                     ("_core.attention_forward (nanobind + C++)", core_direct),
                     ("_core.attention_forward, DLPack capsules", core_capsules),
                     ("cuDNN SDPA forward+backward", both(cudnn)),
                     ("flashref.attention forward+backward", both(ours))):
        rows[name] = per_call_us(fn, a.calls)
        print(f"{name:45s} {rows[name]:8.1f} us per call", flush=True)
    prof = cProfile.Profile()
    run = both(ours)
    prof.enable()
    for _ in range(200):
        run()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue())
    with open(a.out, "w") as fh:
        json.dump(dict(shape=[B, H, S, d], calls=a.calls, us_per_call=rows,
                       torch=torch.__version__), fh, indent=1)


if __name__ == "__main__":
    main()
