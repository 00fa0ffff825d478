"""Arguments from Python to the C++ layer: numpy arrays and torch tensors in the course's 3-D
(B, S, d) layout or the 4-D (B, H, S, d) one, turned into the 4-D host views flashref._core
takes. Views, not copies, wherever the memory allows (a torch tensor on a GPU is copied to the
host once: the judge runs on the CPU)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

# The dtype names flashref's C++ layer parses, from every spelling a user may give.
_DTYPE_NAMES = {
    "f32": "f32", "float32": "f32", "fp32": "f32",
    "f16": "f16", "float16": "f16", "fp16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
}


def dtype_name(dtype: Any, name: str) -> str:
    """'f32', 'f16' or 'bf16' for a string, a numpy dtype or a torch dtype; ValueError naming
    `name` otherwise."""
    if isinstance(dtype, str):
        text = dtype
    elif str(dtype).startswith("torch."):
        text = str(dtype)[len("torch."):]
    else:
        try:
            text = np.dtype(dtype).name
        except TypeError:
            text = str(dtype)
    if text in _DTYPE_NAMES:
        return _DTYPE_NAMES[text]
    raise ValueError(f"{name}: unknown dtype {dtype!r} (expected float32, float16 or bfloat16)")


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def to_host(x: Any, name: str) -> Any:
    """A numpy array or torch CPU tensor of `x`'s values (torch: detached, on the host)."""
    if is_torch(x):
        t = x.detach()
        return t.cpu() if t.device.type != "cpu" else t
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"{name}: must be a numpy array or a torch tensor, got {type(x).__name__}")


def add_head_axis(x: Any, axis: int = 1) -> Any:
    """A view with a head axis of size one inserted (the course's layout has one head)."""
    if is_torch(x):
        return x.unsqueeze(axis)
    return np.expand_dims(x, axis)


class Layout:
    """Which layout a call's arrays are in, decided by q's rank; every other array must agree."""

    def __init__(self, q: Any):
        ndim = getattr(q, "ndim", None)
        if ndim not in (3, 4):
            raise ValueError(
                f"q: must be (B, H, S, d) or the course's (B, S, d), got shape {tuple(getattr(q, 'shape', ()))}")
        self.course = ndim == 3

    def tensor(self, x: Any, name: str) -> Any:
        """Q, K, V, O, dO, dQ, dK, dV as a 4-D host view."""
        x = to_host(x, name)
        want = 3 if self.course else 4
        if x.ndim != want:
            raise ValueError(f"{name}: must be {want}-D like q, got shape {tuple(x.shape)}")
        return add_head_axis(x) if self.course else x

    def lse(self, x: Any, name: str = "lse") -> Any:
        """L as a (B, H, S_q) host view: the course stores it as (B, S_q)."""
        x = to_host(x, name)
        want = 2 if self.course else 3
        if x.ndim != want:
            shape = "(B, S_q)" if self.course else "(B, H, S_q)"
            raise ValueError(f"{name}: must be {shape} for this q, got shape {tuple(x.shape)}")
        return add_head_axis(x) if self.course else x

    def from_canonical(self, x: np.ndarray, is_lse: bool = False) -> np.ndarray:
        """A canonical (B, H, S, d) or (B, H, S) result back in the caller's layout."""
        return x[:, 0] if self.course else x


def optional(x: Optional[Any], convert, name: str) -> Optional[Any]:
    return None if x is None else convert(x, name)
