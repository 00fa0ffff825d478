"""Small attention kernels in numpy, written the way FlashAttention-2 kernels are (online
softmax over key tiles, in float32), each with a switch for one mistake real kernels make, so
the tests can plant it and ask flashref to name it. Shapes are (B, H, S, d) with H_kv dividing
H; `mask` is flashref's ('none', 'causal', 'causal-bottom-right')."""

from __future__ import annotations

import math
from typing import Dict, FrozenSet, Optional, Tuple

import numpy as np

F32 = np.float32


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits), as a tensor core reads them."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    finite = (u & 0x7F800000) != 0x7F800000
    r = np.where(finite, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000), u)
    return r.astype(np.uint32).view(F32)


def _add_toward_zero(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b in float32, rounded toward zero: a tensor core's float32 accumulation."""
    exact = a.astype(np.float64) + b.astype(np.float64)
    f = exact.astype(F32)
    return np.where(np.abs(f.astype(np.float64)) > np.abs(exact), np.nextafter(f, F32(0)), f).astype(F32)


def _truncated_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with every add of the sum rounded toward zero ("rounded_toward_zero")."""
    out = np.zeros((a.shape[0], b.shape[1]), F32)
    for c in range(a.shape[1]):
        out = _add_toward_zero(out, (a[:, c:c + 1] * b[c:c + 1, :]).astype(F32))
    return out


def _visible(mask: str, S_q: int, S_k: int, i: np.ndarray, j: np.ndarray,
             strict: bool = False) -> np.ndarray:
    if mask == "none":
        return np.ones((len(i), len(j)), dtype=bool)
    shift = 0 if mask == "causal" else S_k - S_q
    if strict:  # the diagonal mistake: a query does not see its own key
        return j[None, :] < i[:, None] + shift
    return j[None, :] <= i[:, None] + shift


def empty_states(B: int, H: int, S_q: int, S_k: int, d: int, tile_q: int,
                 tile_k: int) -> Dict[str, np.ndarray]:
    """The states layout (docs/checking-your-kernel.md, section 7) filled with NaN: what a
    kernel never stores stays visibly unset."""
    T_q, T_k = -(-S_q // tile_q), -(-S_k // tile_k)
    return {"m": np.full((B, H, T_q, T_k, tile_q), np.nan, F32),
            "l": np.full((B, H, T_q, T_k, tile_q), np.nan, F32),
            "acc": np.full((B, H, T_q, T_k, tile_q, d), np.nan, F32)}


def flash_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: str = "none",
                  scale: Optional[float] = None, tile_q: int = 16, tile_k: int = 16,
                  mistakes: FrozenSet[str] = frozenset(),
                  states: Optional[Dict[str, np.ndarray]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """O (q's dtype) and L (float32, (B, H, S_q)) by Algorithm 1 over tiles of tile_q query
    rows and tile_k key rows, with the named mistakes. Given `states` (empty_states's arrays),
    stores m, l and acc after each key tile into them, as a kernel debugged with
    `check(states=)` does."""
    B, H, S_q, d = q.shape
    H_kv, S_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if "no_scale" in mistakes:
        scale = 1.0
    asked = mask
    if "mask_ignored" in mistakes:
        mask = "none"
    if "mask_unexpected" in mistakes and asked == "none":
        mask = "causal"
    if "mask_alignment" in mistakes:
        mask = {"causal": "causal-bottom-right", "causal-bottom-right": "causal"}.get(mask, mask)
    op = round_tf32 if "tf32_matmul" in mistakes else (lambda x: x)
    qf, kf, vf = (x.astype(F32) for x in (q, k, v))
    # The padded-key bug: the last key tile is loaded with zeros and never masked. A kernel
    # whose tile shrinks to S_k when the keys fit in one tile has no padding then.
    T_k = min(tile_k, S_k) if "key_padding_unmasked" in mistakes else tile_k
    keys = -(-S_k // T_k) * T_k if "key_padding_unmasked" in mistakes else S_k
    if keys > S_k:
        pad = ((0, 0), (0, 0), (0, keys - S_k), (0, 0))
        kf, vf = np.pad(kf, pad), np.pad(vf, pad)
    O = np.zeros((B, H, S_q, d), dtype=F32)
    L = np.zeros((B, H, S_q), dtype=F32)
    group = H // H_kv
    tail_begin = S_q - S_q % tile_q if S_q % tile_q else S_q
    for b in range(B):
        for h in range(H):
            hk = h // group
            for i0 in range(0, S_q, tile_q):
                i = np.arange(i0, min(S_q, i0 + tile_q))
                Qi = op(qf[b, h, i])
                m = np.zeros(len(i), F32) if "max_init_zero" in mistakes else np.full(len(i), -np.inf, F32)
                l = np.zeros(len(i), F32)
                acc = np.zeros((len(i), d), F32)
                key_end = keys
                if "tail_rows" in mistakes and i0 >= tail_begin and keys > T_k:
                    key_end = keys - T_k  # a wrong loop bound for the tail: one key tile short
                for j0 in range(0, key_end, T_k):
                    j = np.arange(j0, min(keys, j0 + T_k))
                    if "rounded_toward_zero" in mistakes:
                        S = _truncated_product(Qi, kf[b, hk, j].T) * F32(scale)
                    else:
                        S = (Qi @ op(kf[b, hk, j]).T).astype(F32) * F32(scale)
                    seen = _visible(mask, S_q, S_k, i, j, strict="diagonal_strict" in mistakes)
                    if "diagonal_tiles" in mistakes and mask != "none":
                        # A tile crossing the diagonal is treated as fully visible.
                        if seen.any() and not seen.all():
                            seen = np.ones_like(seen)
                    if "softmax_epsilon" in mistakes:
                        S = S + F32(1e-3)  # an epsilon "for stability" on every score
                    S = np.where(seen, S, -np.inf).astype(F32)
                    m_new = np.maximum(m, S.max(axis=1))
                    if "conditional_rescale" in mistakes:
                        # Not a mistake: FlashAttention-4 keeps m until a tile raises it by
                        # more than 8 ln 2 (flashref's d = 128 forward on Hopper does too).
                        with np.errstate(invalid="ignore"):
                            keep = np.isfinite(m) & (m_new - m <= F32(8 * math.log(2.0)))
                        m_new = np.where(keep, m, m_new)
                    with np.errstate(invalid="ignore"):
                        alpha = np.exp(m - m_new)
                        P = np.exp(S - m_new[:, None])
                    if "nan_masked_rows" not in mistakes:
                        # Rows that have seen nothing yet: nothing to add (exp(-inf - -inf)).
                        none = np.isneginf(m_new)
                        alpha = np.where(none, F32(1), alpha)
                        P = np.where(none[:, None], F32(0), P)
                    if "l_not_rescaled" in mistakes:
                        l = (l + P.sum(axis=1)).astype(F32)  # line 12 without exp(m_old - m)
                    else:
                        l = (alpha * l + P.sum(axis=1)).astype(F32)
                    if "rounded_toward_zero" in mistakes:
                        acc = (alpha[:, None] * acc).astype(F32)
                        for c in range(len(j)):  # P~ V_j, every add truncated, into acc
                            acc = _add_toward_zero(acc, (P[:, c:c + 1] * vf[b, hk, j[c]][None, :]).astype(F32))
                    else:
                        acc = (alpha[:, None] * acc + op(P.astype(F32)) @ op(vf[b, hk, j])).astype(F32)
                    m = m_new.astype(F32)
                    if states is not None:
                        r = len(i)
                        at = (b, h, i0 // tile_q, j0 // T_k)
                        states["m"][at][:r], states["l"][at][:r], states["acc"][at][:r] = m, l, acc
                with np.errstate(invalid="ignore", divide="ignore"):
                    if "unnormalized" in mistakes:
                        o = acc
                    else:
                        o = acc / l[:, None]
                    lse = m + np.log(l)
                if "lse_base2" in mistakes:
                    lse = lse / F32(math.log(2.0))
                if "lse_unshifted" in mistakes:
                    with np.errstate(divide="ignore"):
                        lse = np.log(l)
                empty = l == 0
                if "nan_masked_rows" not in mistakes:
                    if "masked_rows_not_zero" in mistakes:
                        o = np.where(empty[:, None], vf[b, hk, :S_k].mean(axis=0), o)
                    else:
                        o = np.where(empty[:, None], F32(0), o)
                    lse = np.where(empty, -np.inf, lse)
                if "tail_garbage" in mistakes and i0 >= tail_begin:
                    rng = np.random.default_rng(i0)
                    o = rng.uniform(-3, 3, o.shape).astype(F32)
                    lse = rng.uniform(7, 13, lse.shape).astype(F32)
                O[b, h, i] = o
                L[b, h, i] = lse
    if "lse_low_precision" in mistakes:
        L = L.astype(np.float16).astype(F32)
    return O.astype(q.dtype), L


def flash_backward_states(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                          lse: np.ndarray, do: np.ndarray, mask: str = "none",
                          scale: Optional[float] = None, tile_q: int = 16, tile_k: int = 16,
                          mistakes: FrozenSet[str] = frozenset()) -> Dict[str, np.ndarray]:
    """Algorithm 2 over tiles in float32 from the forward's O and L, storing its states in the
    layout (docs/checking-your-kernel.md, section 7) as a kernel debugged with check(states=)
    does: D; per tile pair P, dP, dS; dQ_i after each key tile; dV_j, dK_j of each query head
    after each query tile; the scale applied after the loops, so dS, dQ and dK hold none.
    Unset entries (rows past S_q, keys past S_k) stay NaN. Mistakes: "ds_without_D" (line 15
    as dS = P * dP)."""
    B, H, S_q, d = q.shape
    H_kv, S_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = H // H_kv
    T_q, T_k = -(-S_q // tile_q), -(-S_k // tile_k)
    pair = (B, H, T_q, T_k, tile_q, tile_k)
    st = {"D": np.full((B, H, T_q, tile_q), np.nan, F32),
          "P": np.full(pair, np.nan, F32), "dP": np.full(pair, np.nan, F32),
          "dS": np.full(pair, np.nan, F32),
          "dQ": np.full((B, H, T_q, T_k, tile_q, d), np.nan, F32),
          "dV": np.full((B, H, T_k, T_q, tile_k, d), np.nan, F32),
          "dK": np.full((B, H, T_k, T_q, tile_k, d), np.nan, F32)}
    qf, kf, vf, of, dof = (x.astype(F32) for x in (q, k, v, o, do))
    for b in range(B):
        for h in range(H):
            hk = h // group
            D_all = (dof[b, h] * of[b, h]).sum(axis=1).astype(F32)  # line 2
            dK = np.zeros((S_k, d), F32)
            dV = np.zeros((S_k, d), F32)
            for ti in range(T_q):
                i = np.arange(ti * tile_q, min(S_q, (ti + 1) * tile_q))
                r = len(i)
                D = D_all[i]
                st["D"][b, h, ti, :r] = D
                dQ = np.zeros((r, d), F32)
                for tj in range(T_k):
                    j = np.arange(tj * tile_k, min(S_k, (tj + 1) * tile_k))
                    c = len(j)
                    seen = _visible(mask, S_q, S_k, i, j)
                    S = (qf[b, h, i] @ kf[b, hk, j].T).astype(F32) * F32(scale)
                    with np.errstate(invalid="ignore", over="ignore"):
                        P = np.where(seen, np.exp(S - lse[b, h, i][:, None]), F32(0)).astype(F32)
                    dP = (dof[b, h, i] @ vf[b, hk, j].T).astype(F32)
                    dS = P * dP if "ds_without_D" in mistakes else P * (dP - D[:, None])
                    dQ = (dQ + dS @ kf[b, hk, j]).astype(F32)
                    dV[j] = (dV[j] + P.T @ dof[b, h, i]).astype(F32)
                    dK[j] = (dK[j] + dS.T @ qf[b, h, i]).astype(F32)
                    st["P"][b, h, ti, tj, :r, :c] = P
                    st["dP"][b, h, ti, tj, :r, :c] = dP
                    st["dS"][b, h, ti, tj, :r, :c] = dS
                    st["dQ"][b, h, ti, tj, :r] = dQ
                    st["dV"][b, h, tj, ti, :c] = dV[j]
                    st["dK"][b, h, tj, ti, :c] = dK[j]
    return st


def attention_backward(q, k, v, o, lse, do, mask="none", scale=None,
                       mistakes: FrozenSet[str] = frozenset()):
    """dQ, dK, dV from O and L by the recomputation of Algorithm 2 (untiled), float32, with the
    named mistakes."""
    B, H, S_q, d = q.shape
    H_kv, S_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = H // H_kv
    qf, kf, vf, of, dof = (x.astype(F32) for x in (q, k, v, o, do))
    dq = np.zeros_like(qf)
    dk = np.zeros_like(kf)
    dv = np.zeros_like(vf)
    i, j = np.arange(S_q), np.arange(S_k)
    seen = _visible(mask, S_q, S_k, i, j)
    for b in range(B):
        for h in range(H):
            hk = h // group
            if "gqa_reduction" in mistakes and h % group != 0:
                continue  # dK, dV from the first query head of each group only
            S = np.where(seen, qf[b, h] @ kf[b, hk].T * F32(scale), -np.inf)
            with np.errstate(invalid="ignore"):
                P = np.where(seen, np.exp(S - lse[b, h][:, None]), F32(0)).astype(F32)
            D = np.zeros(S_q, F32) if "d_vector" in mistakes else (dof[b, h] * of[b, h]).sum(axis=1)
            dP = dof[b, h] @ vf[b, hk].T
            dS = P * (dP - D[:, None])
            dv[b, hk] += P.T @ dof[b, h]
            dq[b, h] = dS @ kf[b, hk] * (F32(1) if "dq_scale" in mistakes else F32(scale))
            k_scale = scale * scale if "dk_scale" in mistakes else scale
            dk[b, hk] += dS.T @ qf[b, h] * F32(k_scale)
    return dq, dk, dv


def inputs(B, H, H_kv, S_q, S_k, d, seed=0, dtype=F32):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, S_q, d)).astype(dtype)
    k = rng.standard_normal((B, H_kv, S_k, d)).astype(dtype)
    v = rng.standard_normal((B, H_kv, S_k, d)).astype(dtype)
    do = rng.standard_normal((B, H, S_q, d)).astype(dtype)
    return q, k, v, do
