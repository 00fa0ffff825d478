"""A FlashAttention-2 forward in Triton written the way the course's kernels are (one program
per query tile and batch-head, online softmax over key tiles, L saved), for the GPU tests: the
dot products' input precision is a parameter, so the same kernel runs with TF32 on and off."""

import math

import torch
import triton
import triton.language as tl

BLOCK_Q = 32
BLOCK_K = 32


@triton.jit
def _forward(Q, K, V, O, L, S_q, S_k, scale, sqb, sqs, skb, sks, svb, svs, sob, sos,
             D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, CAUSAL: tl.constexpr,
             PRECISION: tl.constexpr):
    qt = tl.program_id(0)
    b = tl.program_id(1)
    rows = qt * BQ + tl.arange(0, BQ)
    cols = tl.arange(0, D)
    q = tl.load(Q + b * sqb + rows[:, None] * sqs + cols[None, :], mask=rows[:, None] < S_q, other=0.0)
    m = tl.full((BQ,), float("-inf"), tl.float32)
    l = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, D), tl.float32)
    for k0 in range(0, S_k, BK):
        keys = k0 + tl.arange(0, BK)
        k = tl.load(K + b * skb + keys[:, None] * sks + cols[None, :], mask=keys[:, None] < S_k, other=0.0)
        v = tl.load(V + b * svb + keys[:, None] * svs + cols[None, :], mask=keys[:, None] < S_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        seen = keys[None, :] < S_k
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None])
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    o = acc / l[:, None]
    tl.store(O + b * sob + rows[:, None] * sos + cols[None, :], o.to(O.dtype.element_ty), mask=rows[:, None] < S_q)
    tl.store(L + b * S_q + rows, m + tl.log(l), mask=rows < S_q)


def make(precision: str):
    """fn(q, k, v, is_causal) -> (O, L) on the course's (B, S, d) tensors; precision is tl.dot's
    input_precision for float32 ('tf32': Triton's default, or 'ieee'); 16-bit inputs ignore it."""

    def triton_attention(q, k, v, is_causal=False):
        B, S_q, d = q.shape
        S_k = k.shape[1]
        if d not in (16, 32, 64, 128):
            raise NotImplementedError(f"head dim {d}")
        o = torch.empty_like(q)
        lse = torch.empty((B, S_q), device=q.device, dtype=torch.float32)
        grid = (triton.cdiv(S_q, BLOCK_Q), B)
        _forward[grid](q, k, v, o, lse, S_q, S_k, 1.0 / math.sqrt(d),
                       q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                       o.stride(0), o.stride(1), D=d, BQ=BLOCK_Q, BK=BLOCK_K, CAUSAL=bool(is_causal),
                       PRECISION=precision if q.dtype == torch.float32 else "tf32")
        return o, lse

    triton_attention.__name__ = f"triton_attention_{precision}"
    return triton_attention
