#!/usr/bin/env python3
"""Would a float32 attention kernel on tensor cores, with every product done as 3xTF32, pass
the exact float32 rule? An experiment on the CPU, before any such kernel is written
(docs/perf-notes.md, "The float32 path at d = 128"; dev/f32/README.md has the results).

Each of Algorithm 1 and 2's six products is emulated the way a 3xTF32 kernel makes it: every
float32 operand x split as big = tf32(x) (cvt.rna) and small = tf32(x - big), and
A B ~ big(A) big(B) + big(A) small(B) + small(A) big(B), each a float32 product (numpy's
sgemm), summed in float32; the softmax, D and dS elementwise in float32 as a kernel does them.
Two controls go through the same path: the products in plain float32 (should pass the exact
rule) and in 1xTF32 (big(A) big(B) alone: should fail it, and pass under --allow-tf32). Each
candidate's O, L, dQ, dK, dV are written as .npy and judged by `flashref check`.

  python3 dev/f32/three_tf32.py --flashref build/flashref [--out DIR] [--seed 0]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np


def tf32(x):
    """Nearest TF32 value, ties away from zero (cvt.rna.tf32.f32)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    finite = (u & 0x7F800000) != 0x7F800000
    r = np.where(finite, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000), u)
    return r.astype(np.uint32).view(np.float32)


def product(mode):
    def plain(a, b):
        return np.matmul(a, b, dtype=np.float32)

    def one(a, b):
        return plain(tf32(a), tf32(b))

    def three(a, b):
        a_big, b_big = tf32(a), tf32(b)
        a_small, b_small = tf32(a - a_big), tf32(b - b_big)
        # Small terms first, as a kernel that adds the correction products into the same
        # accumulator before the large one would; float32 sums throughout.
        return (plain(a_small, b_big) + plain(a_big, b_small)) + plain(a_big, b_big)

    def rz32(x):
        """float64 to float32, rounded toward zero."""
        f = x.astype(np.float32)
        over = np.abs(f.astype(np.float64)) > np.abs(x)
        return np.where(over, np.nextafter(f, np.float32(0)), f).astype(np.float32)

    def three_tensor_core(a, b):
        # As mma.sync runs it: k in steps of 8 (m16n8k8), each of the three products of a step
        # added into one float32 accumulator at once, the 8 products exactly and the sum
        # truncated toward zero (the model of NVIDIA tensor cores' float32 accumulation in
        # Fasi et al. 2021, "Numerical behavior of NVIDIA tensor cores").
        a_big, b_big = tf32(a), tf32(b)
        a_small, b_small = tf32(a - a_big), tf32(b - b_big)
        acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
        for c in range(0, a.shape[1], 8):
            for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):
                part = x[:, c:c + 8].astype(np.float64) @ y[c:c + 8].astype(np.float64)
                acc = rz32(acc.astype(np.float64) + part)
        return acc

    def three_tensor_core_fresh(a, b, block=64):
        # The same mma, each block of `block` reduction indices summed from a zeroed tensor-core
        # accumulator and then added into the float32 result with round to nearest (an FADD),
        # so the truncations no longer pile up over the whole reduction.
        a_big, b_big = tf32(a), tf32(b)
        a_small, b_small = tf32(a - a_big), tf32(b - b_big)
        acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
        for c0 in range(0, a.shape[1], block):
            tmp = np.zeros_like(acc)
            for c in range(c0, min(c0 + block, a.shape[1]), 8):
                for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):
                    part = x[:, c:c + 8].astype(np.float64) @ y[c:c + 8].astype(np.float64)
                    tmp = rz32(tmp.astype(np.float64) + part)
            acc = acc + tmp
        return acc

    def trunc(x):
        """TF32 by dropping the low 13 bits: what a tf32 wgmma reads from a raw float32 tile."""
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        return (u & np.uint32(0xFFFFE000)).view(np.float32)

    def wgmma_blocks(a, b, block, a_halves=(trunc, trunc), b_halves=None):
        # A tf32 wgmma (m64nNk8) per 8 reduction indices, three per step (small terms first),
        # each operand's halves made by its (big, small) pair of roundings (by default both
        # truncated: a raw float32 tile read as TF32); each block of `block` indices summed from
        # a zeroed accumulator with the tensor cores' truncated float32 sums, then added into
        # the result with round to nearest.
        (a_big_of, a_small_of), (b_big_of, b_small_of) = a_halves, b_halves or a_halves
        a_big, b_big = a_big_of(a), b_big_of(b)
        a_small, b_small = a_small_of(a - a_big), b_small_of(b - b_big)
        acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
        for c0 in range(0, a.shape[1], block):
            tmp = np.zeros_like(acc)
            for c in range(c0, min(c0 + block, a.shape[1]), 8):
                for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):
                    part = x[:, c:c + 8].astype(np.float64) @ y[c:c + 8].astype(np.float64)
                    tmp = rz32(tmp.astype(np.float64) + part)
            acc = acc + tmp
        return acc

    if mode.startswith("sm90-fwd-"):
        # sm90-fwd-s{S's block}-pv{P~ V's block}-{rounding}[-{operands}.{rounding}...]: S's
        # block 0 is the whole head dim; trunc: both halves truncated (raw float32 read as TF32),
        # rna: both rounded, rnat: big rounded and small left raw (x - big as float32, which the
        # tensor core truncates). The rounding applies to Q, K, P~ and V, except where a suffix
        # such as `kv.trunc` (operands among q, k, p, v) gives some of them another.
        _, _, sb, pvb, rounding, *overrides = mode.split("-")
        sb, pvb = int(sb[1:]), int(pvb[2:])
        halves = {"trunc": (trunc, trunc), "rna": (tf32, tf32), "rnat": (tf32, trunc)}
        of = {x: halves[rounding] for x in "qkpv"}
        for o in overrides:
            names, r = o.split(".")
            of.update({x: halves[r] for x in names})
        return (lambda a, b: wgmma_blocks(a, b, sb or a.shape[1], of["q"], of["k"]),
                lambda a, b: wgmma_blocks(a, b, pvb, of["p"], of["v"]), plain)

    if mode.startswith("sm90-bwd"):
        # The sm90 3xTF32 forward (sm90-fwd-s32-pv32-rnat) and backward (kernels/sm90/
        # bwd_dkdv_3xtf32.cuh, bwd_dq_3xtf32.cuh), each product oriented as the kernels run it
        # (attention() takes the dict): sm90-bwd-s{the scores' block}-kv{dV's and dK's}-q{dQ's}.
        _, _, sb, kvb, qb = mode.split("-")
        sb, kvb, qb = int(sb[1:]), int(kvb[2:]), int(qb[1:])
        rnat = (tf32, trunc)
        block = lambda n: lambda a, b: wgmma_blocks(a, b, n, rnat, rnat)
        return {"s": block(32), "pv": block(32), "scores": block(sb), "dkdv": block(kvb),
                "dq": block(qb)}

    return {"f32": plain, "1xtf32": one, "3xtf32": three, "3xtf32-rz": three_tensor_core,
            "3xtf32-rz-fresh8": lambda a, b: three_tensor_core_fresh(a, b, 8),
            "3xtf32-rz-fresh64": three_tensor_core_fresh,
            # The sm90 3xTF32 forward: S = Q K^T over the whole head dim in one accumulation,
            # P~ V from a fresh accumulator per key tile of 32 keys (O = alpha O + the tile's
            # product); the backward's products in float32 (the FFMA kernels).
            "sm90-fwd": (lambda a, b: wgmma_blocks(a, b, a.shape[1]),
                         lambda a, b: wgmma_blocks(a, b, 32), plain)}[mode]


def attention(q, k, v, do, causal, mm):
    """O, L (natural log), dQ, dK, dV of one (B, H, S, d) problem, float32 throughout. mm is one
    product for all six, or (S's, P~ V's, the backward's)."""
    kernels = mm if isinstance(mm, dict) else None
    if kernels:
        mm = (kernels["s"], kernels["pv"], None)
    mm_s, mm_pv, mm = mm if isinstance(mm, tuple) else (mm, mm, mm)
    B, H, S_q, d = q.shape
    S_k = k.shape[2]
    scale = np.float32(1.0 / np.sqrt(d))
    o = np.empty_like(q)
    lse = np.empty((B, H, S_q), np.float32)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    visible = np.ones((S_q, S_k), bool)
    if causal:
        visible = np.arange(S_k)[None, :] <= np.arange(S_q)[:, None]
    for b in range(B):
        for h in range(H):
            Q, K, V, dO = q[b, h], k[b, h], v[b, h], do[b, h]
            s = mm_s(Q, K.T) * scale
            s = np.where(visible, s, np.float32(-np.inf)).astype(np.float32)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m).astype(np.float32)
            l = p.sum(axis=1, keepdims=True, dtype=np.float32)
            O = (mm_pv(p, V) / l).astype(np.float32)
            L = (m + np.log(l)).astype(np.float32)
            o[b, h], lse[b, h] = O, L[:, 0]
            # Backward from the stored O and L, as Algorithm 2 runs.
            D = (dO * O).sum(axis=1, keepdims=True, dtype=np.float32)
            if kernels:
                # The dK/dV pass: S and dP by rows, dV^T = dO^T P and dK^T = Q^T dS.
                sc, grad = kernels["scores"], kernels["dkdv"]
                s_b = np.where(visible, (sc(Q, K.T) * scale).astype(np.float32), np.float32(-np.inf))
                P = np.exp(s_b - L).astype(np.float32)
                dS = (P * (sc(dO, V.T) - D)).astype(np.float32)
                dv[b, h] = grad(dO.T, P).T
                dk[b, h] = grad(Q.T, dS).T * scale
                # The dQ pass: S^T and dP^T by the keys' rows, dQ^T = K^T dS^T.
                s_t = np.where(visible.T, (sc(K, Q.T) * scale).astype(np.float32),
                               np.float32(-np.inf))
                P_t = np.exp(s_t - L.T).astype(np.float32)
                dS_t = (P_t * (sc(V, dO.T) - D.T)).astype(np.float32)
                dq[b, h] = kernels["dq"](K.T, dS_t).T * scale
                continue
            P = np.exp(s - L).astype(np.float32)
            dv[b, h] = mm(P.T, dO)
            dP = mm(dO, V.T)
            dS = (P * (dP - D)).astype(np.float32)
            dq[b, h] = mm(dS, K) * scale
            dk[b, h] = mm(dS.T, Q) * scale
    return o, lse, dq, dk, dv


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashref", required=True)
    ap.add_argument("--out", default="/tmp/three_tf32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--problems", default="1,2,512,64,causal;1,2,512,128,causal;1,2,1024,128,none;"
                    "1,1,2048,128,causal;1,2,512,128,causal,4",
                    help="B,H,S,d,mask[,sigma]: ';'-separated; inputs normal with standard "
                         "deviation sigma (default 1; 4 makes the softmax sharp)")
    ap.add_argument("--modes", default="f32,3xtf32,1xtf32",
                    help="of f32, 3xtf32, 1xtf32, 3xtf32-rz (3xTF32 with the tensor cores' "
                         "accumulation: steps of 8, truncated sums), 3xtf32-rz-fresh8 and "
                         "3xtf32-rz-fresh64 (the same from a zeroed accumulator every 8 or 64 "
                         "reduction indices, added into the result with round to nearest), "
                         "sm90-fwd (the sm90 3xTF32 forward's products, the backward's float32), "
                         "sm90-bwd-s8-kv16-q32 (the sm90 3xTF32 forward and backward, the "
                         "backward's groups of the scores, dV and dK, and dQ)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    rows = []
    for spec in a.problems.split(";"):
        B, H, S, d, mask, *sigma = spec.split(",")
        B, H, S, d = int(B), int(H), int(S), int(d)
        sigma = np.float32(sigma[0] if sigma else 1)
        tensors = {n: rng.standard_normal((B, H, S, d), dtype=np.float32) * sigma
                   for n in ("q", "k", "v", "do")}
        folder = os.path.join(a.out, spec.replace(",", "_"))
        os.makedirs(folder, exist_ok=True)
        for n, t in tensors.items():
            np.save(os.path.join(folder, f"{n}.npy"), t)
        for mode in a.modes.split(","):
            outs = attention(tensors["q"], tensors["k"], tensors["v"], tensors["do"],
                             mask == "causal", product(mode))
            for n, t in zip(("o", "lse", "dq", "dk", "dv"), outs):
                np.save(os.path.join(folder, f"{mode}_{n}.npy"), t)
            for tf32_rule in ((False, True) if mode == "1xtf32" else (False,)):
                cmd = [a.flashref, "check", "--json", "--dtype", "f32", "--mask", mask]
                cmd += [x for n in ("q", "k", "v", "do")
                        for x in (f"--{n}", os.path.join(folder, f"{n}.npy"))]
                cmd += [x for n in ("o", "lse", "dq", "dk", "dv")
                        for x in (f"--{n}", os.path.join(folder, f"{mode}_{n}.npy"))]
                if tf32_rule:
                    cmd.append("--allow-tf32")
                r = subprocess.run(cmd, capture_output=True, text=True)
                try:
                    report = json.loads(r.stdout)
                except json.JSONDecodeError:
                    print(r.stdout, r.stderr, file=sys.stderr)
                    raise
                rows.append((spec, mode + (" (TF32 rule)" if tf32_rule else ""), r.returncode,
                             report))
                ratios = " ".join(f"{t['tensor']} {t['ratio']:.2f}" for t in report["tensors"])
                print(f"{spec:22s} {mode:7s} {'TF32 rule ' if tf32_rule else 'exact rule'} "
                      f"{'PASS' if r.returncode == 0 else 'FAIL'}  error / limit: {ratios}",
                      flush=True)
    with open(os.path.join(a.out, "reports.json"), "w") as fh:
        json.dump([dict(problem=s, candidate=m, rc=rc, report=rep) for s, m, rc, rep in rows],
                  fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
