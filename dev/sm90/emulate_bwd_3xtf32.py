#!/usr/bin/env python3
"""A host model of kernels/sm90/bwd_dkdv_3xtf32.cuh's and bwd_dq_3xtf32.cuh's data movement, to check their index maps
without a GPU.

Every address the kernel computes (the TMA's swizzled tiles, split_k_major_tile's permuted
halves, the A fragments read by rows and by columns, P^T's and dS^T's halves written at
p_position, the wgmma descriptors' k-step offsets, the epilogue's transposed rows), the walk
(query heads of the group, the query tiles from m_begin, the special steps) and the masks are
written here as the kernel writes them, per thread, over a byte-addressed shared memory. What it
does not model: timing, barriers and proxies (the GPU's suites and compute-sanitizer judge
those), and the tensor cores' truncating sums. wgmma is modelled from the PTX ISA's layouts
alone (A fragment rows g, g + 8 at columns t, t + 4; the accumulator's element 4i + e at row
g + 8 (e / 2), column 8i + 2t + e % 2; B read K-major from its descriptor's start address, rows
128 bytes apart, eight-row atoms 1024 apart, the 16-byte chunk XORed with the row's bits
[7:9]), in float64 after the kernel's TF32 split. dK and dV come out within about 2^-21 of a
float64 reference when every map is right; a wrong map gives errors of the values' own size.

    python3 dev/sm90/emulate_bwd_3xtf32.py      # the problems below; exit 1 on a mismatch
"""
import sys

import numpy as np

SW = 128  # bytes of a swizzled row


def f32_tile_offset(rows, row, col):
    return (col // 32) * (rows * SW) + row * SW + ((((col % 32) // 4) ^ (row % 8)) * 16) + (col % 4) * 4


def tf32_split(x):
    """split_tf32_raw_small(_finite) on float32 values: big rounded to nearest (ties away)."""
    x32 = np.asarray(x, dtype=np.float32)
    bits = x32.view(np.uint32)
    big = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    small = (x32 - big).astype(np.float32)
    return big.astype(np.float64), small.astype(np.float64)


class Smem:
    def __init__(self, nbytes):
        self.w = np.full(nbytes // 4, np.nan)

    def st(self, addr, v):
        addr = np.asarray(addr)
        assert np.all(addr % 4 == 0)
        self.w[addr // 4] = v

    def ld(self, addr):
        addr = np.asarray(addr)
        assert np.all(addr % 4 == 0)
        return self.w[addr // 4]


def swizzle(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


TID = np.arange(128)
W, LANE = TID // 32, TID % 32
G, T = LANE // 4, LANE % 4


def wgmma_rs(acc, a, desc, n, scale_d, smem):
    """D(64 x n) (+)= A(64 x 8) B(8 x n): a is (128, 4) per thread, desc the B start address."""
    A = np.zeros((64, 8))
    A[16 * W + G, T] = a[:, 0]
    A[16 * W + G + 8, T] = a[:, 1]
    A[16 * W + G, T + 4] = a[:, 2]
    A[16 * W + G + 8, T + 4] = a[:, 3]
    nn, kk = np.meshgrid(np.arange(n), np.arange(8), indexing="ij")
    addr = desc + (nn // 8) * 1024 + (nn % 8) * SW + kk * 4
    B = smem.ld(swizzle(addr))  # (n, 8): B[n][k]
    D = A @ B.T
    out = np.zeros((128, n // 2))
    for i in range(n // 8):
        for e in range(4):
            out[:, 4 * i + e] = D[16 * W + G + 8 * (e // 2), 8 * i + 2 * T + e % 2]
    return (acc if scale_d else 0.0) + out


def tma_load(smem, base, tile, rows, d_valid, kD):
    """A rows x kD tile (rows past the tensor and columns past d read as zero)."""
    full = np.zeros((rows, kD))
    full[: tile.shape[0], :d_valid] = tile[:, :d_valid]
    r, c = np.meshgrid(np.arange(rows), np.arange(kD), indexing="ij")
    smem.st(base + f32_tile_offset(rows, r, c), full)


def split_k_major_tile(smem, raw, big_tile, small_tile, rows, kD):
    for u in range(rows * kD // 8):
        cb, row, pair = u // (rows * 4), (u // 4) % rows, u % 4
        at0 = cb * (rows * SW) + row * SW + (((2 * pair) ^ (row % 8)) * 16)
        at1 = cb * (rows * SW) + row * SW + (((2 * pair + 1) ^ (row % 8)) * 16)
        v = np.concatenate([smem.ld(raw + at0 + 4 * np.arange(4)), smem.ld(raw + at1 + 4 * np.arange(4))])
        big, small = tf32_split(v)
        smem.st(big_tile + at0 + 4 * np.arange(4), big[[0, 2, 4, 6]])
        smem.st(big_tile + at1 + 4 * np.arange(4), big[[1, 3, 5, 7]])
        smem.st(small_tile + at0 + 4 * np.arange(4), small[[0, 2, 4, 6]])
        smem.st(small_tile + at1 + 4 * np.arange(4), small[[1, 3, 5, 7]])


def a_fragment_rows(smem, rows, tile, r_lo, ks, t):
    blk, chunk = ks // 4, (ks % 4) * 2 + t // 2
    big, small = np.zeros((128, 4)), np.zeros((128, 4))
    for hf in range(2):
        r = r_lo + 8 * hf
        at = tile + blk * (rows * SW) + r * SW + ((chunk ^ (r % 8)) * 16) + (t % 2) * 8
        x0, x1 = smem.ld(at), smem.ld(at + 4)
        big[:, hf], small[:, hf] = tf32_split(x0)
        big[:, 2 + hf], small[:, 2 + hf] = tf32_split(x1)
    return big, small


def a_fragment_cols(smem, rows, tile, col0, ks, t):
    big, small = np.zeros((128, 4)), np.zeros((128, 4))
    for x in range(2):
        at = tile + f32_tile_offset(rows, 8 * ks + 2 * t + x, col0)
        v0, v1 = smem.ld(at), smem.ld(at + 4)
        big[:, 2 * x], small[:, 2 * x] = tf32_split(v0)
        big[:, 2 * x + 1], small[:, 2 * x + 1] = tf32_split(v1)
    return big, small


def p_position(r):
    return (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1)


def issue_group(smem, raw, rows, by_cols, a_at, first_ks, steps, desc_big, desc_small, n):
    part = np.zeros((128, n // 2))
    for kq in range(steps):
        ks = first_ks + kq
        frag = a_fragment_cols if by_cols else a_fragment_rows
        big, small = frag(smem, rows, raw, a_at, ks, T)
        off = (ks // 4) * (n * SW) + (ks % 4) * 32
        part = wgmma_rs(part, small, desc_big + off, n, kq > 0, smem)
        part = wgmma_rs(part, big, desc_small + off, n, True, smem)
        part = wgmma_rs(part, big, desc_big + off, n, True, smem)
    return part


def emulate(q, k, v, do, lse_ws, dsum_ws, scale, causal, offset, kD, score_steps, grad_steps):
    """dK, dV of one batch: q, do (S_q, H, d); k, v (S_k, H_kv, d); lse_ws, dsum_ws (H, S_q_pad)."""
    S_q, H, d = q.shape
    S_k, H_kv, _ = k.shape
    group = H // H_kv
    bm, bn, stages = 64, 32, 2
    mtiles_d = kD // 64
    half, raw, grad, vec = bn * kD * 4, bm * kD * 4, bn * bm * 4, bm * 4
    base = 0
    sKBig, sKSmall, sVBig, sVSmall = base, base + half, base + 2 * half, base + 3 * half
    sQ = lambda st: base + 4 * half + st * 2 * raw
    sdO = lambda st: sQ(st) + raw
    sPBig = base + 4 * half + stages * 2 * raw
    sPSmall, sdSBig, sdSSmall = sPBig + grad, sPBig + 2 * grad, sPBig + 3 * grad
    sL = lambda st: sPBig + 4 * grad + st * 2 * vec
    sDs = lambda st: sL(st) + vec
    dk_out, dv_out = np.full((S_k, H_kv, d), np.nan), np.full((S_k, H_kv, d), np.nan)
    m_tiles = -(-S_q // bm)
    r_lo, col0 = 16 * W + G, 16 * W + 2 * G
    for n_block in range(-(-S_k // bn)):
        for h_kv in range(H_kv):
            smem = Smem(sDs(1) + vec)
            n0 = n_block * bn
            keys_valid = min(bn, S_k - n0)
            m_begin = 0
            if causal:
                first_q = n0 - offset
                m_begin = 0 if first_q <= 0 else (m_tiles if first_q >= S_q else first_q // bm)
            per_head = m_tiles - m_begin
            total = per_head * group
            if total > 0:
                tma_load(smem, sQ(1), k[n0:n0 + bn, h_kv], bn, d, kD)
                tma_load(smem, sdO(1), v[n0:n0 + bn, h_kv], bn, d, kD)
                split_k_major_tile(smem, sQ(1), sKBig, sKSmall, bn, kD)
                split_k_major_tile(smem, sdO(1), sVBig, sVSmall, bn, kD)
            acc_dv = np.zeros((mtiles_d, 128, bn // 2))
            acc_dk = np.zeros((mtiles_d, 128, bn // 2))
            for it in range(total):
                st = it % stages
                h = h_kv * group + it // per_head
                m0 = (m_begin + it % per_head) * bm
                tma_load(smem, sQ(st), q[m0:m0 + bm, h], bm, d, kD)
                tma_load(smem, sdO(st), do[m0:m0 + bm, h], bm, d, kD)
                smem.st(sL(st) + 4 * np.arange(bm), lse_ws[h, m0:m0 + bm])
                smem.st(sDs(st) + 4 * np.arange(bm), dsum_ws[h, m0:m0 + bm])
                special = (causal and n0 + bn - 1 > m0 + offset) or (
                    (S_k == 1 or (causal and -offset >= m0 and -offset < m0 + bm)))
                # S and dP
                kgs = score_steps
                ngroups = kD // (8 * kgs)
                acc_s = sum(issue_group(smem, sQ(st), bm, False, r_lo, kgs * dg, kgs, sKBig, sKSmall, bn)
                            for dg in range(ngroups))
                acc_dp = sum(issue_group(smem, sdO(st), bm, False, r_lo, kgs * dg, kgs, sVBig, sVSmall, bn)
                             for dg in range(ngroups))
                lse = [smem.ld(sL(st) + 4 * (r_lo + 8 * hf)) for hf in range(2)]
                dsm = [smem.ld(sDs(st) + 4 * (r_lo + 8 * hf)) for hf in range(2)]
                single = [np.zeros(128, bool), np.zeros(128, bool)]
                if special:
                    for hf in range(2):
                        qq = m0 + r_lo + 8 * hf
                        single[hf] = (S_k == 1) | (causal & (qq + offset == 0))
                for i in range(bn // 8):
                    for hf in range(2):
                        for e in range(2):
                            idx, c, r = 4 * i + 2 * hf + e, 8 * i + 2 * T + e, r_lo + 8 * hf
                            with np.errstate(invalid="ignore", over="ignore"):
                                x = np.float32(acc_s[:, idx]).astype(np.float64) * scale - lse[hf]
                                if special:
                                    if causal:
                                        x = np.where(m0 + r + offset < n0 + c, -np.inf, x)
                                    p = np.where(single[hf], np.where(x == -np.inf, 0.0, 1.0), np.exp(x))
                                    ds = np.where(single[hf], 0.0, p * (acc_dp[:, idx] - dsm[hf]))
                                else:
                                    p = np.exp(x)
                                    ds = p * (acc_dp[:, idx] - dsm[hf])
                            at = f32_tile_offset(bn, c, p_position(r))
                            pb, ps = tf32_split(p)
                            smem.st(sPBig + at, pb)
                            smem.st(sPSmall + at, ps)
                            db, dsm_ = tf32_split(ds)
                            smem.st(sdSBig + at, db)
                            smem.st(sdSSmall + at, dsm_)
                kgg = grad_steps
                qgroups = bm // (8 * kgg)
                for mt in range(mtiles_d):
                    for qg in range(qgroups):
                        acc_dv[mt] += issue_group(smem, sdO(st), bm, True, 64 * mt + col0, kgg * qg, kgg,
                                                  sPBig, sPSmall, bn)
                        acc_dk[mt] += issue_group(smem, sQ(st), bm, True, 64 * mt + col0, kgg * qg, kgg,
                                                  sdSBig, sdSSmall, bn)
            for mt in range(mtiles_d):
                for i in range(bn // 8):
                    for hf in range(2):
                        for e in range(2):
                            key, col, idx = 8 * i + 2 * T + e, 64 * mt + col0 + hf, 4 * i + 2 * hf + e
                            ok = (key < keys_valid) & (col < d)
                            dk_out[n0 + key[ok], h_kv, col[ok]] = acc_dk[mt][ok, idx] * scale
                            dv_out[n0 + key[ok], h_kv, col[ok]] = acc_dv[mt][ok, idx]
    return dk_out, dv_out


def emulate_dq(q, k, v, do, lse_ws, dsum_ws, scale, causal, offset, kD, score_steps, grad_steps):
    """dQ of one batch, as kernels/sm90/bwd_dq_3xtf32.cuh computes it."""
    S_q, H, d = q.shape
    S_k, H_kv, _ = k.shape
    group = H // H_kv
    bm, bn, stages = 32, 64, 2
    mtiles_d = kD // 64
    half, raw, grad = bm * kD * 4, bn * kD * 4, bm * bn * 4
    sQBig, sQSmall, sdOBig, sdOSmall = 0, half, 2 * half, 3 * half
    sK = lambda st: 4 * half + st * 2 * raw
    sV = lambda st: sK(st) + raw
    sdSBig = 4 * half + stages * 2 * raw
    sdSSmall = sdSBig + grad
    dq_out = np.full((S_q, H, d), np.nan)
    n_blocks = -(-S_k // bn)
    r_lo, col0 = 16 * W + G, 16 * W + 2 * G
    for m_block in range(-(-S_q // bm)):
        for h in range(H):
            hk = h // group
            smem = Smem(sdSSmall + grad)
            row0 = m_block * bm
            rows_valid = min(bm, S_q - row0)
            n_end = n_blocks
            if causal:
                last_key = row0 + rows_valid - 1 + offset
                n_end = 0 if last_key < 0 else min(n_blocks, last_key // bn + 1)
            if n_end > 0:
                tma_load(smem, sK(1), q[row0:row0 + bm, h], bm, d, kD)
                tma_load(smem, sV(1), do[row0:row0 + bm, h], bm, d, kD)
                split_k_major_tile(smem, sK(1), sQBig, sQSmall, bm, kD)
                split_k_major_tile(smem, sV(1), sdOBig, sdOSmall, bm, kD)
            acc_dq = np.zeros((mtiles_d, 128, bm // 2))
            lse = {}
            dsm = {}
            for i in range(bm // 8):
                for e in range(2):
                    lse[2 * i + e] = lse_ws[h, row0 + 8 * i + 2 * T + e]
                    dsm[2 * i + e] = dsum_ws[h, row0 + 8 * i + 2 * T + e]
            tile_single = S_k == 1 or (causal and -offset >= row0 and -offset < row0 + bm)
            it = 0
            special_prefix = True
            for it in range(n_end):
                st = it % stages
                n0 = (n_end - 1 - it) * bn
                needs = n0 + bn > S_k or (causal and n0 + bn - 1 > row0 + offset)
                special_prefix = special_prefix and (tile_single or needs)
                special = special_prefix
                tma_load(smem, sK(st), k[n0:n0 + bn, hk], bn, d, kD)
                tma_load(smem, sV(st), v[n0:n0 + bn, hk], bn, d, kD)
                kgs = score_steps
                ngroups = kD // (8 * kgs)
                acc_s = sum(issue_group(smem, sK(st), bn, False, r_lo, kgs * dg, kgs, sQBig, sQSmall, bm)
                            for dg in range(ngroups))
                acc_dp = sum(issue_group(smem, sV(st), bn, False, r_lo, kgs * dg, kgs, sdOBig, sdOSmall, bm)
                             for dg in range(ngroups))
                for i in range(bm // 8):
                    for hf in range(2):
                        for e in range(2):
                            idx, c, r = 4 * i + 2 * hf + e, 8 * i + 2 * T + e, r_lo + 8 * hf
                            with np.errstate(invalid="ignore", over="ignore"):
                                x = np.float32(acc_s[:, idx]).astype(np.float64) * scale - lse[2 * i + e]
                                if special:
                                    key = n0 + r
                                    x = np.where((key >= S_k) | (causal & (key > row0 + c + offset)), -np.inf, x)
                                    single = tile_single & ((S_k == 1) | (causal & (row0 + c + offset == 0)))
                                    ds = np.where(single, 0.0, np.exp(x) * (acc_dp[:, idx] - dsm[2 * i + e]))
                                else:
                                    ds = np.exp(x) * (acc_dp[:, idx] - dsm[2 * i + e])
                            at = f32_tile_offset(bm, c, p_position(r))
                            db, dsm_ = tf32_split(ds)
                            smem.st(sdSBig + at, db)
                            smem.st(sdSSmall + at, dsm_)
                kgg = grad_steps
                kgroups = bn // (8 * kgg)
                for mt in range(mtiles_d):
                    for kg in range(kgroups):
                        acc_dq[mt] += issue_group(smem, sK(st), bn, True, 64 * mt + col0, kgg * kg, kgg,
                                                  sdSBig, sdSSmall, bm)
            for mt in range(mtiles_d):
                for i in range(bm // 8):
                    for hf in range(2):
                        for e in range(2):
                            row, col, idx = 8 * i + 2 * T + e, 64 * mt + col0 + hf, 4 * i + 2 * hf + e
                            ok = (row < rows_valid) & (col < d)
                            dq_out[row0 + row[ok], h, col[ok]] = acc_dq[mt][ok, idx] * scale
    return dq_out


def reference(q, k, v, do, scale, causal, offset):
    S_q, H, d = q.shape
    S_k, H_kv, _ = k.shape
    group = H // H_kv
    dk, dv, dq = np.zeros_like(k), np.zeros_like(v), np.zeros_like(q)
    lse_ws = np.zeros((H, S_q + 128))
    lse_ws[:, S_q:] = np.inf
    dsum_ws = np.zeros((H, S_q + 128))
    for h in range(H):
        hk = h // group
        s = scale * q[:, h] @ k[:, hk].T
        if causal:
            mask = np.arange(S_k)[None, :] > np.arange(S_q)[:, None] + offset
            s = np.where(mask, -np.inf, s)
        m = s.max(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            lse = np.where(np.isfinite(m[:, 0]), m[:, 0] + np.log(np.exp(s - np.where(np.isfinite(m), m, 0)).sum(1)),
                           -np.inf)
            p = np.where(np.isfinite(lse)[:, None], np.exp(s - lse[:, None]), 0.0)
        o = p @ v[:, hk]
        dp = do[:, h] @ v[:, hk].T
        dsum = (do[:, h] * o).sum(1)
        ds = p * (dp - dsum[:, None])
        dv[:, hk] += p.T @ do[:, h]
        dk[:, hk] += scale * ds.T @ q[:, h]
        dq[:, h] = scale * ds @ k[:, hk]
        lse_ws[h, :S_q] = np.where(np.isfinite(lse), lse, np.inf)
        dsum_ws[h, :S_q] = dsum
    return dk, dv, dq, lse_ws, dsum_ws


PROBLEMS = [  # S_q, S_k, H, H_kv, d, causal, bottom_right, scale
    (100, 70, 4, 2, 72, True, True, None),
    (130, 130, 2, 1, 128, True, False, None),
    (64, 200, 2, 2, 64, False, False, None),
    (70, 33, 3, 1, 40, True, False, 1.0),
    (50, 1, 2, 2, 128, False, False, None),
    (1, 90, 1, 1, 128, True, True, -0.09),
    (200, 100, 2, 2, 64, True, True, None),  # bottom-right with S_q > S_k: rows that see no key
]


def main():
    rng = np.random.default_rng(7)
    worst = 0.0
    for (S_q, S_k, H, H_kv, d, causal, br, scale) in PROBLEMS:
        kD = 64 if d <= 64 else 128
        scale = 1 / np.sqrt(d) if scale is None else scale
        offset = S_k - S_q if br else 0
        q, do = rng.standard_normal((S_q, H, d)), rng.standard_normal((S_q, H, d))
        k, v = rng.standard_normal((S_k, H_kv, d)), rng.standard_normal((S_k, H_kv, d))
        dk_ref, dv_ref, dq_ref, lse_ws, dsum_ws = reference(q, k, v, do, scale, causal, offset)
        runs = [("dK/dV", steps, lambda st: emulate(q, k, v, do, lse_ws, dsum_ws, scale, causal, offset, kD, *st),
                 (dk_ref, dv_ref)) for steps in [(1, 2), (4, 4), (2, 2)]]
        runs += [("dQ", steps, lambda st: (emulate_dq(q, k, v, do, lse_ws, dsum_ws, scale, causal, offset, kD, *st),),
                  (dq_ref,)) for steps in [(1, 4), (2, 2)]]
        for name, steps, run, refs in runs:
            outs = run(steps)
            err = max(np.abs(o - r).max() / max(np.abs(r).max(), 1e-3) for o, r in zip(outs, refs))
            ok = all(np.isfinite(o).all() for o in outs) and err < 1e-5
            worst = max(worst, err if np.isfinite(err) else np.inf)
            print(f"{name:5s} S_q {S_q:4d} S_k {S_k:4d} H {H}/{H_kv} d {d:3d} causal {causal} br {br} "
                  f"scale {scale:.3f} groups {steps}: rel err {err:.2e} {'ok' if ok else 'MISMATCH'}")
            if not ok:
                return 1
    print(f"all match; worst relative error {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
