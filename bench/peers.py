#!/usr/bin/env python3
"""PyTorch's attention backends on the problems flashref's cuda backend is benchmarked on, in
the same run: SDPA flash (FlashAttention-2), cuDNN, memory-efficient, and a naive
matmul-softmax-matmul. Forward, backward and forward+backward medians of
triton.testing.do_bench, with TFLOP/s counted as FlashAttention counts them (forward
4*B*H*S_q*S_k*d, halved for causal; backward 2.5x). Writes $OUT/peers.json (or --out).

  python3 bench/peers.py [--configs leaderboard,leaderboard128,f32 | --sweep NAME] [--rep-ms 300]
                         [--flashref] [--out F]
With --flashref, flashref's own cuda backend (flashref.attention, the Python package on
PYTHONPATH) is timed by the same function in the same process, once before each problem's peers
(peer "flashref") and once after them ("flashref-after"), so that ours and the peers share the
harness, the warm-up and the card's clock state (docs/benchmarks.md, "one harness").
With --sweep (naive-memory, course, leaderboard: the points of `flashref bench --sweep`), the
naive rows also carry the bytes of its S x S matrices and whether they fit a 12 GiB / 80 GiB
card; points that do not fit this one are skipped and say so.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

# name -> (B, H, S, d, dtype, causal, backends)
CONFIGS = {
    "leaderboard": (1, 16, 16384, 64, torch.bfloat16, True, ("flash", "cudnn", "efficient", "naive")),
    "leaderboard128": (1, 16, 16384, 128, torch.bfloat16, True, ("flash", "cudnn", "efficient", "naive")),
    "leaderboard-noncausal": (1, 16, 16384, 64, torch.bfloat16, False, ("flash", "cudnn")),
    "f32": (1, 1, 16384, 64, torch.float32, True, ("efficient", "naive")),
    # The exact float32 path's weak points in the course sweeps (docs/perf-notes.md, run 6):
    # d = 128 on a long causal head, and problem 1's batch of 8 with no mask.
    "f32-d128": (1, 1, 16384, 128, torch.float32, True, ("efficient", "naive")),
    "f32-b8-d128": (8, 1, 4096, 128, torch.float32, False, ("efficient", "naive")),
    # The same problem with TF32 allowed, the peer of `flashref bench --allow-tf32`. Only the
    # naive attention changes: its matmuls are cuBLAS's, which torch.backends.cuda.matmul.
    # allow_tf32 switches to TF32. No SDPA kernel has such a switch: the memory-efficient one
    # runs float32 on tensor cores as 3xTF32 (CUTLASS OpMultiplyAddFastF32, float32-level
    # accuracy) whatever the flag says, so its "f32" row is its only float32 number.
    "f32-tf32": (1, 1, 16384, 64, torch.float32, True, ("naive",)),
}
# FlashAttention-3's benchmark grid (B * S = 32k, H = 16, causal): the peers of `flashref
# bench`'s fa3grid rows in scripts/device-run.
for _s in (1024, 2048, 4096, 8192, 16384, 32768):
    for _d in (64, 128):
        CONFIGS[f"fa3grid-s{_s}-d{_d}"] = (32768 // _s, 16, _s, _d, torch.bfloat16, True, ("flash", "cudnn"))
TF32_CONFIGS = {"f32-tf32"}


def set_matmul_tf32(on):
    """Lets cuBLAS float32 matmuls use TF32 (or not); returns what restores the setting.
    PyTorch 2.9 and later spell it fp32_precision and warn on the older allow_tf32."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        before = m.fp32_precision
        m.fp32_precision = "tf32" if on else "ieee"
        return lambda: setattr(m, "fp32_precision", before)
    before = m.allow_tf32
    m.allow_tf32 = on
    return lambda: setattr(m, "allow_tf32", before)


def flops_forward(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def naive_attention(q, k, v, causal):
    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        keep = torch.ones(s, s, device=q.device, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def flashref_attention():
    """flashref.attention (the cuda backend's defaults: the sm90 family on Hopper, the
    deterministic backward), or an ImportError that says why it cannot run."""
    import flashref
    if "cuda" not in flashref.backends():
        raise ImportError(f"flashref was built without CUDA (backends: {flashref.backends()})")

    def run(q, k, v, causal):
        return flashref.attention(q, k, v, is_causal=causal)
    return run


PEERS = {
    "flash": sdpa(SDPBackend.FLASH_ATTENTION),
    "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
    "efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
    "naive": naive_attention,
}


def measure(config, peer, b, h, s, d, dtype, causal, rep_ms):
    row = dict(config=config, peer=peer, b=b, h=h, s=s, d=d, dtype=str(dtype).split(".")[-1],
               causal=causal)
    fn = PEERS[peer.removesuffix("-after")]
    restore_tf32 = set_matmul_tf32(config in TF32_CONFIGS)
    try:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        fwd = triton.testing.do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=rep_ms,
                                      return_mode="median")
        o = fn(q, k, v, causal)
        do = torch.randn_like(o)
        bwd = triton.testing.do_bench(
            lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), warmup=25,
            rep=rep_ms, return_mode="median")

        def both():
            fn(q, k, v, causal).backward(do)

        total = triton.testing.do_bench(both, warmup=25, rep=rep_ms, return_mode="median",
                                        grad_to_none=[q, k, v])
        f = flops_forward(b, h, s, d, causal)
        row.update(fwd_ms=fwd, bwd_ms=bwd, total_ms=total, fwd_tflops=f / fwd / 1e9,
                   bwd_tflops=2.5 * f / bwd / 1e9, total_tflops=3.5 * f / total / 1e9)
        print(f"{config:22s} {peer:14s} fwd {fwd:8.3f} ms  bwd {bwd:8.3f} ms  fwd+bwd {total:8.3f} ms"
              f"  ({row['total_tflops']:6.1f} TFLOP/s)", flush=True)
    except Exception as e:  # a peer that cannot run a problem is reported, not fatal
        row["error"] = f"{type(e).__name__}: {str(e)[:160]}"
        print(f"{config:22s} {peer:14s} {row['error']}", flush=True)
    finally:
        restore_tf32()
    torch.cuda.empty_cache()
    return row


# The named sweeps of `flashref bench --sweep` (verify/sweeps.cpp), point for point:
# name -> list of (label, B, H, S, d, dtype, causal); every peer runs every point.
def sweep_points(name):
    if name == "naive-memory":
        return [(f"B=8 S={s} d={d}", 8, 1, s, d, torch.float32, False)
                for d in (16, 32, 64, 128) for s in (256, 1024, 4096, 8192, 16384)]
    if name == "course":
        return [(f"{'bf16' if t == torch.bfloat16 else 'f32'} S={s} d={d}", 1, 1, s, d, t, True)
                for t in (torch.bfloat16, torch.float32) for d in (16, 32, 64, 128)
                for s in (2 ** k for k in range(7, 17))]
    if name == "leaderboard":
        return [(f"bf16 B=1 H=16 S=16384 d={d} causal", 1, 16, 16384, d, torch.bfloat16, True)
                for d in (64, 128)]
    sys.exit(f"peers.py: unknown sweep '{name}' (known: naive-memory, course, leaderboard)")


def naive_bytes(b, h, s):
    # The naive attention's B x H x S x S float32 matrices: scores and probabilities in the
    # forward, and their gradients in the backward (4 live at the peak).
    return 4 * b * h * s * s * 4


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="leaderboard,leaderboard128,f32")
    ap.add_argument("--sweep", help="run a named sweep's points instead of --configs")
    ap.add_argument("--rep-ms", type=int, default=300)
    ap.add_argument("--flashref", action="store_true",
                    help="also time flashref.attention, before and after each problem's peers")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "peers.json"))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}",
          flush=True)
    if args.flashref:
        PEERS["flashref"] = flashref_attention()  # fails loudly: the comparison was asked for
    rows = []
    if args.sweep:
        free = torch.cuda.mem_get_info()[0]
        for label, b, h, s, d, dtype, causal in sweep_points(args.sweep):
            peers = ("naive", "efficient") if dtype == torch.float32 else ("naive", "flash",
                                                                          "cudnn", "efficient")
            need = naive_bytes(b, h, s)
            for peer in peers:
                if peer == "naive" and need > 0.8 * free:
                    row = dict(config=label, peer=peer, b=b, h=h, s=s, d=d, causal=causal,
                               error=f"skipped: needs ~{need / 2**30:.1f} GiB")
                    print(f"{label:22s} {peer:14s} {row['error']}", flush=True)
                else:
                    row = measure(label, peer, b, h, s, d, dtype, causal, args.rep_ms)
                if peer == "naive":
                    row.update(naive_bytes=need, fits_12GiB=need <= 12 * 2**30,
                               fits_80GiB=need <= 80 * 2**30)
                rows.append(row)
    else:
        for name in args.configs.split(","):
            if name not in CONFIGS:
                sys.exit(f"peers.py: unknown config '{name}' (known: {', '.join(CONFIGS)})")
            b, h, s, d, dtype, causal, peers = CONFIGS[name]
            if args.flashref and name not in TF32_CONFIGS:
                peers = ("flashref",) + peers + ("flashref-after",)
            for peer in peers:
                rows.append(measure(name, peer, b, h, s, d, dtype, causal, args.rep_ms))
    meta = dict(torch=torch.__version__, triton=triton.__version__,
                device=torch.cuda.get_device_name())
    if args.flashref:
        import flashref
        meta["flashref"] = flashref.__version__
    with open(args.out, "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
