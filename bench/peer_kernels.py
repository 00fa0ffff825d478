#!/usr/bin/env python3
"""One forward and one backward of a PyTorch peer (bench/peers.py's runners) between
cudaProfilerStart and cudaProfilerStop, after warm-up runs outside them: the peer's own kernels
for Nsight Compute's `--profile-from-start off`, to read their grids, registers, shared memory,
durations and utilization beside ours (scripts/device-run profile, FLASHREF_PROFILE_PEERS).

  ncu --profile-from-start off ... python3 bench/peer_kernels.py --peer cudnn --shape B,H,S,d
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import PEERS  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default="cudnn", choices=sorted(PEERS))
    ap.add_argument("--shape", required=True, help="B,H,S,d")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    ap.add_argument("--no-causal", action="store_true")
    args = ap.parse_args()
    b, h, s, d = (int(x) for x in args.shape.split(","))
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    causal = not args.no_causal
    fn = PEERS[args.peer]
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    do = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    for _ in range(3):  # warm-up: plans built, workspaces allocated, outside the profile
        torch.autograd.grad(fn(q, k, v, causal), (q, k, v), do)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    o = fn(q, k, v, causal)
    torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
