"""PyTorch's CPU flash-attention kernel (scaled_dot_product_attention on CPU tensors), timed the
way flashref_cpu_timing times the cpu backend: one warm-up, then the median of REPS runs of the
forward and of the backward. The peer of cpu/README.md's Performance section.

usage: python3 torch_cpu_peer.py THREADS [S] [REPS]
"""
import sys
import time

import torch
import torch.nn.functional as F


def main():
    threads = int(sys.argv[1])
    s = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, s, 64, dtype=torch.float32, requires_grad=True) for _ in range(3))
    fwd, bwd = [], []
    for i in range(reps + 1):
        t0 = time.perf_counter()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t1 = time.perf_counter()
        o.backward(torch.ones_like(o))
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        if i > 0:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
    fwd.sort()
    bwd.sort()
    flops = 4 * 8 * s * s * 64 / 2
    f, b = fwd[len(fwd) // 2], bwd[len(bwd) // 2]
    print(f"torch-cpu  threads {threads:2d} forward {f:9.2f} ms {flops / f / 1e6:7.1f} GFLOP/s   "
          f"backward {b:9.2f} ms {2.5 * flops / b / 1e6:7.1f} GFLOP/s  (torch {torch.__version__})",
          flush=True)


if __name__ == "__main__":
    main()
