"""flashref.attention for PyTorch: the cpu backend on CPU tensors and the cuda backend on CUDA
tensors, on torch's current stream, with no copies of inputs whose head dim is contiguous.
Registered as the torch.library custom ops flashref::attention_forward and
flashref::attention_backward, with fake (meta) implementations so torch.compile traces them
without graph breaks; differentiable through register_autograd.

Called eagerly (no torch.compile, tracer, torch.func transform or dispatch mode about: _eager),
flashref.attention and FlashAttentionFunction skip the custom ops' dispatch, which cost several
times the host time of _core itself, and call the same _forward and _backward the ops' bodies
call: the same _core calls, the same bits (python/tests/test_torch.py checks it).

Imported only when torch is (flashref/__init__.py): the package works without it."""

# No `from __future__ import annotations`: torch.library reads the custom ops' annotations.
import math
from typing import Optional, Tuple

import torch
import torch.autograd.forward_ad
from torch.utils.dlpack import to_dlpack

from . import _core

_MASKS = ("none", "causal", "causal-bottom-right")

# A device's current stream as its raw pointer, without the torch.cuda.Stream object
# torch.cuda.current_stream builds (what inductor's generated code calls too); absent from
# builds without CUDA, where no tensor is a CUDA tensor either.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# Tensor types whose every op runs eagerly. Subclasses (FakeTensor, FunctionalTensor, DTensor,
# ...) may trace or redistribute: they take the custom ops, which they know how to handle.
_PLAIN = (torch.Tensor, torch.nn.Parameter)

# What _eager reads: private switches of torch's, so a torch without one of them runs every
# call through the custom ops (correct, only slower) rather than failing.
try:
    _dispatch_modes = torch._C._len_torch_dispatch_stack
    _function_modes = torch._C._len_torch_function_stack
    _functorch_active = torch._C._are_functorch_transforms_active
    _jit_tracing = torch._C._is_tracing
    _profiler_enabled = torch.autograd._profiler_enabled
    _forward_ad = torch.autograd.forward_ad  # its _current_level: read per call, it changes
    _EAGER_PATH = hasattr(_forward_ad, "_current_level")
except AttributeError:  # pragma: no cover - depends on torch's version
    _EAGER_PATH = False


def _eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether flashref may call _core itself rather than through its custom ops: plain CPU or
    CUDA tensors, and nothing about that must see the op (torch.compile, torch.jit.trace,
    make_fx and every other dispatch mode, torch function modes, torch.func transforms,
    forward-mode AD), which the custom ops serve as before. When in doubt, the custom ops:
    they are only slower."""
    # First: Dynamo folds it to True and so traces none of the checks below, which it could not.
    if torch.compiler.is_compiling():
        return False
    return (_EAGER_PATH
            and type(q) in _PLAIN and type(k) in _PLAIN and type(v) in _PLAIN
            and (q.is_cpu or q.is_cuda)
            and q.layout == torch.strided and k.layout == torch.strided
            and v.layout == torch.strided
            and not _dispatch_modes()
            and not _function_modes()
            and not _functorch_active()
            and _forward_ad._current_level < 0
            and not _jit_tracing())


def _arg(t: torch.Tensor):
    """t as the backends read it, in place when they can: any strides with d contiguous; on
    CUDA also 16-byte aligned rows (the kernels' vector loads: pointer, strides and d whole
    numbers of 16 bytes). Otherwise one copy. Handed over as a DLPack capsule: given the tensor,
    nanobind would call Tensor.__dlpack__, whose Python checks cost 4-5 us a tensor (more than a
    small problem's kernel on the CPU). What they refuse cannot come here or does not matter
    to the backends: a conjugate bit or another layout (_check_args, _eager), requires_grad (a
    read), a device other than the current one (_call_on makes q's current for the call, and
    no stream is synchronized either way)."""
    if t.is_contiguous() and (not t.is_cuda or (
            t.data_ptr() % 16 == 0 and t.shape[-1] * t.element_size() % 16 == 0)):
        return to_dlpack(t)  # the common case, decided without reading every stride
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return to_dlpack(t.contiguous())
    if t.is_cuda:
        chunk = 16 // t.element_size()
        if t.data_ptr() % 16 != 0 or any(
                s % chunk != 0 for s, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1):
            return to_dlpack(t.contiguous())
    return to_dlpack(t)


def _gold_or_backend(q: torch.Tensor) -> bool:
    """float64 CPU tensors run the float64 gold (gradcheck's precision); others a backend."""
    return q.dtype == torch.float64


def _call_on(q: torch.Tensor, fn, *args) -> None:
    """fn(*args, stream) with q's device current (the cuda backend allocates its workspace on
    the current device) and its current stream; stream 0 for CPU tensors. Switches the device
    only when q is elsewhere: entering torch.cuda.device costs more than the check."""
    device = q.get_device()  # -1 for CPU tensors
    if device < 0:
        fn(*args, 0)
    elif device == torch.cuda.current_device():
        fn(*args, _stream(device))
    else:
        with torch.cuda.device(device):
            fn(*args, _stream(device))


def _stream(device: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def _new_like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialized contiguous tensor of t's shape, dtype and device: empty_like says it
    in less host time than new_empty or torch.empty, which parse a shape."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str,
             scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and L by _core: the body of the custom op and of the eager path alike."""
    B, H, S_q, _ = q.shape
    o = _new_like(q)
    lse = q.new_empty((B, H, S_q), dtype=torch.float32 if q.dtype != torch.float64 else q.dtype)
    if _gold_or_backend(q):
        _core.gold_forward(_arg(q), _arg(k), _arg(v), to_dlpack(o), to_dlpack(lse), mask, scale)
        return o, lse
    _call_on(q, _core_forward, _arg(q), _arg(k), _arg(v), to_dlpack(o), to_dlpack(lse), mask,
             scale)
    return o, lse


def _core_forward(q, k, v, o, lse, mask, scale, stream):
    _core.attention_forward(q, k, v, o, lse, mask, scale, stream, False)


def _backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              o: torch.Tensor, lse: torch.Tensor, mask: str, scale: float,
              deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV by _core: the body of the custom op and of the eager path alike."""
    dq, dk, dv = _new_like(q), _new_like(k), _new_like(v)
    if _gold_or_backend(q):
        _core.gold_backward(_arg(q), _arg(k), _arg(v), _arg(do), to_dlpack(dq), to_dlpack(dk),
                            to_dlpack(dv), mask, scale)
        return dq, dk, dv
    _call_on(q, _core_backward, _arg(q), _arg(k), _arg(v), _arg(o), _arg(do),
             to_dlpack(lse.contiguous()), to_dlpack(dq), to_dlpack(dk), to_dlpack(dv), mask,
             scale, deterministic)
    return dq, dk, dv


def _core_backward(q, k, v, o, do, lse, dq, dk, dv, mask, scale, deterministic, stream):
    _core.attention_backward(q, k, v, o, do, lse, dq, dk, dv, mask, scale, stream, False,
                             deterministic)


@torch.library.custom_op("flashref::attention_forward", mutates_args=())
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str,
                      scale: float, deterministic: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and L (float32, (B, H, S_q)) for (B, H, S, d) inputs. deterministic is the backward's
    (kept for it by autograd)."""
    return _forward(q, k, v, mask, scale)


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
    return _backward(do, q, k, v, o, lse, mask, scale, deterministic)


@attention_backward.register_fake
def _(do, q, k, v, o, lse, mask, scale, deterministic=True):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, mask, scale, *rest = inputs
    deterministic = rest[0] if rest else True  # the schema's default when not passed
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.mask, ctx.scale, ctx.deterministic = mask, scale, deterministic


def _backward_formula(ctx, do, dlse):
    # L is an output for the course's Function and for checking, not a differentiable one:
    # its gradient (None unless the caller's loss used L) is not propagated.
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, ctx.mask, ctx.scale, ctx.deterministic)
    return dq, dk, dv, None, None, None


attention_forward.register_autograd(_backward_formula, setup_context=_setup_context)


def _profiled(name: str, fn, *args):
    """fn(*args), inside a profiler range named as the custom op fn stands in for when the
    profiler is on, so that a trace of the eager path still shows flashref's ops."""
    if _profiler_enabled():
        with torch.profiler.record_function(name):
            return fn(*args)
    return fn(*args)


def _forward_any(q, k, v, mask, scale, deterministic=True):
    """O and L, no autograd (a Function's forward, or nothing requires grad): _core directly
    when eager, else the custom op."""
    if _eager(q, k, v):
        return _profiled("flashref::attention_forward", _forward, q, k, v, mask, scale)
    return attention_forward(q, k, v, mask, scale, deterministic)


def _backward_any(do, q, k, v, o, lse, mask, scale, deterministic=True):
    """dQ, dK, dV for a Function's backward: _core directly when eager, else the custom op. So
    with create_graph=True (grad mode on in the backward): the custom op has no autograd
    formula, so double backward is refused as it always was rather than differentiated wrong."""
    if not torch.is_grad_enabled() and _eager(do, q, k):
        return _profiled("flashref::attention_backward", _backward, do, q, k, v, o, lse, mask,
                         scale, deterministic)
    return attention_backward(do, q, k, v, o, lse, mask, scale, deterministic)


class _Attention(torch.autograd.Function):
    """flashref.attention's eager path with autograd: the custom op's formula (_setup_context,
    _backward_formula) without its dispatch. O is the one output: L is saved, not returned, so
    it has no gradient to ignore. Applied only where _eager(q, k, v) holds."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, deterministic):
        o, lse = _profiled("flashref::attention_forward", _forward, q, k, v, mask, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mask, ctx.scale, ctx.deterministic = mask, scale, deterministic
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward_any(do, q, k, v, o, lse, ctx.mask, ctx.scale, ctx.deterministic)
        return dq, dk, dv, None, None, None


def _check_args(q, k, v, is_causal: bool, mask: Optional[str], scale: Optional[float]):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: must be a torch tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name}: must be (B, H, S, d) or the course's (B, S, d), got shape "
                             f"{tuple(t.shape)}")
        if t is q:  # q against itself: nothing to compare (and t.device costs a new object)
            continue
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
    if not _eager(q, k, v):
        o, _ = attention_forward(q, k, v, mask, scale, deterministic)
    elif torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o = _Attention.apply(q, k, v, mask, scale, deterministic)
    else:  # Nothing to differentiate: no autograd.Function either.
        o, _ = _profiled("flashref::attention_forward", _forward, q, k, v, mask, scale)
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
        o4, lse4 = _forward_any(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), mask, scale)
        o, lse = o4.squeeze(1), lse4.squeeze(1)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mask, ctx.scale = mask, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward_any(do.unsqueeze(1), q.unsqueeze(1), k.unsqueeze(1),
                                   v.unsqueeze(1), o.unsqueeze(1), lse.unsqueeze(1), ctx.mask,
                                   ctx.scale)
        return dq.squeeze(1), dk.squeeze(1), dv.squeeze(1), None
