"""flashref.check and flashref.reference: the judge and the gold on arrays from Python (and,
with states=, the judge of a kernel's per-step states: _states.py)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

from . import _core
from ._arrays import Layout, dtype_name
from ._report import Report
from ._states import Select, select_arg, states_arg

Tile = Optional[Union[int, Tuple[int, int]]]

# Where worst indices are placed when tile= is not given: the cpu backend's tiles, as the CLI.
DEFAULT_TILE = 64


def problem_args(mask: str, scale: Optional[float], dtype: Any, grad_dtype: Any) -> Any:
    if not isinstance(mask, str):
        raise TypeError(f"mask: must be 'none', 'causal' or 'causal-bottom-right', got {mask!r}")
    args = _core.ProblemArgs()
    args.mask = mask
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"scale: must be a number, got {type(scale).__name__}")
        args.scale = float(scale)
    if dtype is not None:
        args.dtype = dtype_name(dtype, "dtype")
    if grad_dtype is not None:
        args.grad_dtype = dtype_name(grad_dtype, "grad_dtype")
    return args


def tiles(tile: Tile) -> Tuple[int, int]:
    """(B_q, B_k) from tile= (an int for both, a pair, or None for the default)."""
    if tile is None:
        return DEFAULT_TILE, DEFAULT_TILE
    if isinstance(tile, int) and not isinstance(tile, bool):
        return tile, tile
    if isinstance(tile, (tuple, list)) and len(tile) == 2 and all(
            isinstance(t, int) and not isinstance(t, bool) for t in tile):
        return int(tile[0]), int(tile[1])
    raise TypeError(f"tile: must be an int or a pair (B_q, B_k) of ints, got {tile!r}")


def _precision(allow_tf32: bool, lse_dtype: Any) -> Tuple[bool, str]:
    if not isinstance(allow_tf32, bool):
        raise TypeError(f"allow_tf32: must be a bool, got {allow_tf32!r}")
    return allow_tf32, "f32" if lse_dtype is None else dtype_name(lse_dtype, "lse_dtype")


def _three_tf32(three_tf32: bool, allow_tf32: bool) -> bool:
    if not isinstance(three_tf32, bool):
        raise TypeError(f"three_tf32: must be a bool, got {three_tf32!r}")
    if three_tf32 and allow_tf32:
        raise ValueError("three_tf32: names 3xTF32 products and allow_tf32 names TF32 products: "
                         "give one (3xTF32 products err by a few float32 roundings, TF32 ones by about "
                         "2^-10)")
    return three_tf32


def check(q: Any, k: Any, v: Any, *, o: Any = None, lse: Any = None, do: Any = None,
          dq: Any = None, dk: Any = None, dv: Any = None, mask: str = "none",
          scale: Optional[float] = None, dtype: Any = None, allow_tf32: bool = False,
          lse_dtype: Any = None, grad_dtype: Any = None, tile: Tile = None, states: Any = None,
          select: Select = None, three_tf32: bool = False) -> Report:
    """Judges a kernel's outputs (o, lse) and gradients (dq, dk, dv, given do) against the
    float64 gold under flashref's rule, and diagnoses what failed.

    q, k, v: the inputs the kernel received, numpy arrays or torch tensors, in the course's
    (B, S, d) layout or (B, H, S, d) with k and v's H_kv heads dividing q's H. lse is (B, S_q)
    or (B, H, S_q). mask: 'none', 'causal' (top-left, PyTorch's is_causal) or
    'causal-bottom-right'. scale: default 1/sqrt(d). dtype: what the kernel computed in (default
    q's). allow_tf32: the kernel's float32 products take TF32 inputs (Triton's tl.dot default).
    three_tf32: its float32 products are 3xTF32, each operand split into two TF32 halves
    (CUTLASS's FastF32, PyTorch's memory-efficient kernel, Triton's input_precision="tf32x3"):
    judged as float32 with each product's own error in the floor. lse_dtype: the dtype L was stored in. grad_dtype: the gradients' dtype (default dtype).
    tile: the kernel's (B_q, B_k), to place the worst elements in its tiles.

    states: the kernel's per-step states, judged step by step to find the first step where it
    leaves Algorithm 1 or 2 (report.first_divergence): a dict with any of "m", "l", "acc" (the
    forward's) and "D", "P", "dP", "dS", "dQ", "dV", "dK" (the backward's, which need do) (numpy
    arrays or torch tensors, any float dtype), or a folder holding them as .npy files, in the
    layout of trace_states. Needs tile. The forward's verdict is report.states, the backward's
    report.backward_states; the first divergence is the forward's when it has one (Algorithm 1
    runs first), else the backward's, as `flashref check --states` reports it. select: (b, h) or (b, h, i) when the states hold one
    head (and one query tile).
    """
    layout = Layout(q)
    args = problem_args(mask, scale, dtype, grad_dtype)
    allow_tf32, lse_name = _precision(allow_tf32, lse_dtype)
    three_tf32 = _three_tf32(three_tf32, allow_tf32)
    # What `flashref check --states` refuses before reading anything.
    if states is not None:
        if tile is None:
            raise ValueError("tile: states= needs your kernel's tiles: give tile=(B_q, B_k)")
        if allow_tf32:
            raise ValueError("allow_tf32: the states are judged against the cpu mirror, which "
                             "has no TF32 products: drop allow_tf32=True or states=")
        if three_tf32:
            raise ValueError("three_tf32: the states are judged against the cpu mirror, whose "
                             "products are float32: drop three_tf32=True or states=")
        states = states_arg(states)
    elif select is not None:
        raise ValueError("select: select= says which part of the problem states= holds: give "
                         "states=")
    select_values = select_arg(select)
    tile_q, tile_k = tiles(tile)
    tensors: Dict[str, Any] = {}
    for name, x in (("o", o), ("dq", dq), ("dk", dk), ("dv", dv)):
        if x is not None:
            tensors[name] = layout.tensor(x, name)
    if lse is not None:
        tensors["lse"] = layout.lse(lse)
    core = _core.check(layout.tensor(q, "q"), layout.tensor(k, "k"), layout.tensor(v, "v"),
                       tensors, None if do is None else layout.tensor(do, "do"), args,
                       allow_tf32, three_tf32, lse_name, tile_q, tile_k, states,
                       list(select_values))
    return Report(core)


def reference(q: Any, k: Any, v: Any, *, do: Any = None, mask: str = "none",
              scale: Optional[float] = None, dtype: Any = None, allow_tf32: bool = False,
              grad_dtype: Any = None) -> Dict[str, Dict[str, Any]]:
    """The numbers flashref judges against: {"gold": {...}, "baseline": {...}}, each with "o"
    and "lse" (and "dq", "dk", "dv" when do is given). The gold is float64 (numpy); the baseline
    is the naive reference computed in the problem's dtype (float32 numpy arrays holding its
    values exactly). Arrays come back in q's layout (the course's 3-D one or 4-D)."""
    layout = Layout(q)
    args = problem_args(mask, scale, dtype, grad_dtype)
    if not isinstance(allow_tf32, bool):
        raise TypeError(f"allow_tf32: must be a bool, got {allow_tf32!r}")
    out = _core.reference(layout.tensor(q, "q"), layout.tensor(k, "k"), layout.tensor(v, "v"),
                          None if do is None else layout.tensor(do, "do"), args, allow_tf32)
    return {kind: {name: layout.from_canonical(a) for name, a in arrays.items()}
            for kind, arrays in out.items()}


