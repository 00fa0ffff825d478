"""flashref.attention for PyTorch: the cpu backend on CPU tensors and the cuda backend on CUDA
tensors, on torch's current stream, with no copies of inputs whose head dim is contiguous.
Registered as the torch.library custom ops flashref::attention_forward and
flashref::attention_backward, with fake (meta) implementations so torch.compile traces them
without graph breaks; differentiable through register_autograd.

Imported only when torch is (flashref/__init__.py): the package works without it."""

# No `from __future__ import annotations`: torch.library reads the custom ops' annotations.
import math
from typing import Optional, Tuple

import torch

from . import _core

_MASKS = ("none", "causal", "causal-bottom-right")


def _readable(t: torch.Tensor) -> torch.Tensor:
    """t as the backends read it, in place when they can: any strides with d contiguous; on
    CUDA also 16-byte aligned rows (the kernels' vector loads: pointer, strides and d whole
    numbers of 16 bytes). Otherwise one copy."""
    t = t.detach()
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    if t.is_cuda:
        chunk = 16 // t.element_size()
        misaligned = t.data_ptr() % 16 != 0 or any(
            t.stride(i) % chunk != 0 for i in range(t.ndim - 1) if t.shape[i] > 1)
        if misaligned:
            return t.contiguous()
    return t


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _gold_or_backend(q: torch.Tensor) -> bool:
    """float64 CPU tensors run the float64 gold (gradcheck's precision); others a backend."""
    return q.dtype == torch.float64


@torch.library.custom_op("flashref::attention_forward", mutates_args=())
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str,
                      scale: float, deterministic: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and L (float32, (B, H, S_q)) for (B, H, S, d) inputs. deterministic is the backward's
    (kept for it by autograd)."""
    B, H, S_q, d = q.shape
    o = torch.empty((B, H, S_q, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, S_q), dtype=torch.float32 if q.dtype != torch.float64 else q.dtype,
                      device=q.device)
    if _gold_or_backend(q):
        _core.gold_forward(_readable(q), _readable(k), _readable(v), o, lse, mask, scale)
        return o, lse
    with torch.cuda.device(q.device) if q.is_cuda else _nothing():
        _core.attention_forward(_readable(q), _readable(k), _readable(v), o, lse, mask, scale,
                                _stream(q), False)
    return o, lse


@attention_forward.register_fake
def _(q, k, v, mask, scale, deterministic=True):
    B, H, S_q, d = q.shape
    lse_dtype = torch.float32 if q.dtype != torch.float64 else q.dtype
    return q.new_empty((B, H, S_q, d)), q.new_empty((B, H, S_q), dtype=lse_dtype)


@torch.library.custom_op("flashref::attention_backward", mutates_args=())
def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       o: torch.Tensor, lse: torch.Tensor, mask: str, scale: float,
                       deterministic: bool = True) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (dK, dV summed over each group of query heads). deterministic=False lets the
    cuda backend's sm90 kernels add dQ atomically: faster, bits may change between runs."""
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if _gold_or_backend(q):
        _core.gold_backward(_readable(q), _readable(k), _readable(v), _readable(do), dq, dk, dv,
                            mask, scale)
        return dq, dk, dv
    with torch.cuda.device(q.device) if q.is_cuda else _nothing():
        _core.attention_backward(_readable(q), _readable(k), _readable(v), _readable(o),
                                 _readable(do), lse.detach().contiguous(), dq, dk, dv, mask, scale,
                                 _stream(q), False, deterministic)
    return dq, dk, dv


@attention_backward.register_fake
def _(do, q, k, v, o, lse, mask, scale, deterministic=True):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, mask, scale, *rest = inputs
    deterministic = rest[0] if rest else True  # the schema's default when not passed
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.mask, ctx.scale, ctx.deterministic = mask, scale, deterministic


def _backward(ctx, do, dlse):
    # L is an output for the course's Function and for checking, not a differentiable one:
    # its gradient (None unless the caller's loss used L) is not propagated.
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, ctx.mask, ctx.scale, ctx.deterministic)
    return dq, dk, dv, None, None, None


attention_forward.register_autograd(_backward, setup_context=_setup_context)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _check_args(q, k, v, is_causal: bool, mask: Optional[str], scale: Optional[float]):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: must be a torch tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name}: must be (B, H, S, d) or the course's (B, S, d), got shape "
                             f"{tuple(t.shape)}")
        if t.ndim != q.ndim:
            raise ValueError(f"{name}: must have q's rank {q.ndim}, got shape {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from q's {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, q on {q.device}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"q: dtype must be float32, float16, bfloat16 (or float64 on the CPU: the "
                        f"gold), got {q.dtype}")
    if q.dtype == torch.float64 and q.is_cuda:
        raise TypeError("q: float64 runs the gold, on CPU tensors only")
    if mask is not None and is_causal:
        raise ValueError("mask: give is_causal or mask, not both")
    if mask is None:
        mask = "causal" if is_causal else "none"
    if mask not in _MASKS:
        raise ValueError(f"mask: unknown mask {mask!r} (expected one of {list(_MASKS)})")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale: must be a finite number, got {scale!r}")
    return mask, float(scale)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False,
              mask: Optional[str] = None, scale: Optional[float] = None,
              deterministic: bool = True) -> torch.Tensor:
    """O = softmax(scale * Q K^T + mask) V by flashref's backends, differentiable.

    q: (B, H, S_q, d) or the course's (B, S_q, d); k, v: (B, H_kv, S_k, d) with H_kv dividing H
    (or (B, S_k, d)). Any strides (d contiguous, else one copy). is_causal: PyTorch's top-left
    causal mask; mask: 'none', 'causal' or 'causal-bottom-right' instead. CUDA tensors run the
    cuda backend on the current stream, CPU tensors the cpu backend; float64 CPU tensors run
    the float64 gold (for torch.autograd.gradcheck). deterministic=False lets the backward add
    dQ atomically where the cuda backend can (Hopper's sm90 kernels: faster, its bits may change
    from run to run); refused while torch.use_deterministic_algorithms(True) is on."""
    mask, scale = _check_args(q, k, v, is_causal, mask, scale)
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic: must be a bool, got {deterministic!r}")
    if not deterministic and torch.are_deterministic_algorithms_enabled():
        raise RuntimeError("deterministic=False while torch.use_deterministic_algorithms(True) "
                           "is on: the atomic backward is not reproducible")
    course = q.ndim == 3
    if course:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    _check_shapes(q, k, v)
    o, _ = attention_forward(q, k, v, mask, scale, deterministic)
    return o.squeeze(1) if course else o


def _check_shapes(q, k, v):
    B, H, S_q, d = q.shape
    if k.shape[0] != B or k.shape[3] != d:
        raise ValueError(f"k: shape {tuple(k.shape)} does not fit q's {tuple(q.shape)}: B and d "
                         f"must match")
    if v.shape != k.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} must equal k's {tuple(k.shape)}")
    if H % k.shape[1] != 0:
        raise ValueError(f"k: its {k.shape[1]} heads must divide q's {H}")


class FlashAttentionFunction(torch.autograd.Function):
    """The course's calling convention: FlashAttentionFunction.apply(q, k, v, is_causal) with
    q, k, v of shape (B, S, d) returns O, and saves L as the one (B, S_q) tensor among its saved
    tensors (where the course's tests look for it)."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        mask, scale = _check_args(q, k, v, bool(is_causal), None, None)
        if q.ndim != 3:
            raise ValueError(f"q: the course's Function takes (B, S, d), got shape {tuple(q.shape)}")
        o4, lse4 = attention_forward(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), mask, scale)
        o, lse = o4.squeeze(1), lse4.squeeze(1)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mask, ctx.scale = mask, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(do.unsqueeze(1), q.unsqueeze(1), k.unsqueeze(1),
                                        v.unsqueeze(1), o.unsqueeze(1), lse.unsqueeze(1),
                                        ctx.mask, ctx.scale)
        return dq.squeeze(1), dk.squeeze(1), dv.squeeze(1), None
