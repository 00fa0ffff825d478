"""flashref from Python: judge an attention kernel's outputs and gradients against a float64
gold (check), find the first step where its states leave Algorithm 1 (trace_states,
check(states=)), fuzz a kernel with shrinking (fuzz, check_function), and run flashref's own
FlashAttention-2 backends on torch tensors (attention). See docs/python.md.

The C++ library does the work (flashref._core, a nanobind extension); torch is optional."""

from __future__ import annotations

import pkgutil

# In a build tree the extension sits in <build>/python/flashref/, apart from these files
# (python/CMakeLists.txt): let the package span both folders.
__path__ = pkgutil.extend_path(__path__, __name__)

from . import _core  # noqa: E402
from ._check import check, reference  # noqa: E402
from ._fuzz import FuzzResult, check_function, fuzz  # noqa: E402
from ._report import Divergence, Finding, Report, StatesVerdict, TensorVerdict  # noqa: E402
from ._states import trace_states  # noqa: E402
from . import testing  # noqa: E402

__version__ = "0.1.0"

#: The diagnosis codes a Finding may carry (the CLI's).
FINDING_CODES = tuple(_core.finding_codes())


def backends() -> list:
    """The backends this build has: 'reference', 'cpu', and 'cuda' when built with CUDA."""
    return list(_core.backend_names())


def plan(backend: str, shape, *, heads_kv=None, mask: str = "none", dtype: str = "bf16",
         allow_tf32: bool = False) -> str:
    """Which of `backend`'s kernels would run a problem of `shape` (B, H, S_q, S_k, d), and why,
    in one line; "" for a backend with one way to run everything. The cuda backend names its
    kernel family: "sm80: mma.sync m16n8k16; compute capability 8.6: the wgmma kernels are
    sm_90a code, which runs on 9.0 only" says that a problem did not reach the Hopper kernels,
    and why. heads_kv: H_kv (default H). Launches nothing."""
    B, H, S_q, S_k, d = shape
    return _core.plan(backend, B, H, H if heads_kv is None else heads_kv, S_q, S_k, d, mask,
                      dtype, allow_tf32)


try:  # The torch layer: only when torch imports.
    from ._torch import FlashAttentionFunction, attention  # noqa: E402
except ImportError as _torch_missing:  # pragma: no cover - depends on the machine
    _TORCH_ERROR = str(_torch_missing)

    def attention(*args, **kwargs):
        """flashref.attention needs PyTorch."""
        raise ImportError(f"flashref.attention needs PyTorch ({_TORCH_ERROR})")

    class FlashAttentionFunction:  # type: ignore[no-redef]
        """flashref.FlashAttentionFunction needs PyTorch."""

        @staticmethod
        def apply(*args, **kwargs):
            raise ImportError(f"flashref.FlashAttentionFunction needs PyTorch ({_TORCH_ERROR})")


__all__ = [
    "check", "reference", "trace_states", "fuzz", "check_function", "attention",
    "FlashAttentionFunction", "Report", "Finding", "TensorVerdict", "StatesVerdict", "Divergence",
    "FuzzResult", "testing", "backends", "plan", "FINDING_CODES",
]
