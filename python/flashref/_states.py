"""flashref.trace_states and the states= of flashref.check: the per-step states of Algorithm 1
(and, given do, of Algorithm 2) on your own inputs, in the layout of
docs/checking-your-kernel.md, section 7 (the one `flashref trace --out` writes and
`flashref check --states` reads)."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._arrays import Layout, to_host

#: The forward states, in the order Algorithm 1 computes them (lines 10, 12, 13).
FORWARD_STATES = ("m", "l", "acc")
#: The backward states, in the order Algorithm 2 computes them (lines 2, 12, 14, 15, 16, 13, 17).
BACKWARD_STATES = ("D", "P", "dP", "dS", "dQ", "dV", "dK")

Select = Optional[Sequence[int]]


def select_arg(select: Select) -> Tuple[int, ...]:
    """() for None, or (b, h) / (b, h, i) checked for type and sign."""
    if select is None:
        return ()
    if not isinstance(select, (tuple, list)) or len(select) not in (2, 3) or not all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in select):
        raise TypeError(f"select: must be (b, h) or (b, h, i), ints, got {select!r}")
    if any(x < 0 for x in select):
        raise ValueError(f"select: each of (b, h[, i]) must be >= 0, got {tuple(select)}")
    return tuple(int(x) for x in select)


def states_arg(states: Any) -> Any:
    """A folder (str or path) as a str, or a dict of the states' arrays as host arrays; None
    entries are left out. TypeError or ValueError naming "states" otherwise."""
    if isinstance(states, (str, os.PathLike)):
        return os.fspath(states)
    if not isinstance(states, dict):
        raise TypeError("states: must be a dict of arrays ('m', 'l', 'acc'; 'D', 'P', 'dP', 'dS', "
                        "'dQ', 'dV', 'dK') or a folder holding their .npy files, got "
                        f"{type(states).__name__}")
    for key in states:
        if key in ("baseline", "gold"):
            raise ValueError(f"states: unknown key {key!r}: give trace_states(...)[{key!r}], "
                             "a dict of states, not the whole result")
        if key not in FORWARD_STATES + BACKWARD_STATES:
            raise ValueError(f"states: unknown key {key!r} (expected one of 'm', 'l', 'acc', "
                             "'D', 'P', 'dP', 'dS', 'dQ', 'dV', 'dK')")
    arrays = {key: to_host(x, f"states[{key!r}]") for key, x in states.items() if x is not None}
    if not arrays:
        raise ValueError("states: no state to judge: give any of 'm', 'l', 'acc' (the "
                         "forward's) or 'D', 'P', 'dP', 'dS', 'dQ', 'dV', 'dK' (the backward's)")
    return arrays


def trace_states(q: Any, k: Any, v: Any, do: Any = None, *, tile: Any = None, mask: str = "none",
                 scale: Optional[float] = None, dtype: Any = None,
                 select: Select = None) -> Dict[str, Dict[str, np.ndarray]]:
    """The states of Algorithm 1 on your inputs, in your kernel's tiles: after each key tile j
    of each query tile i, the running max m (line 10), the running sum l (line 12) and the
    unnormalized accumulator acc (line 13).

    With do (the gradient of O), also the states of Algorithm 2 (docs/checking-your-kernel.md,
    section 7): D (line 2), per tile pair P, dP, dS (lines 12, 14, 15, without the scale), dQ_i
    after each key tile (line 16), and dV_j, dK_j of each query head after each query tile
    (lines 13, 17), under the keys "D", "P", "dP", "dS", "dQ", "dV", "dK"; shapes (B, H, T_q,
    B_q), (B, H, T_q, T_k, B_q, B_k) for P, dP, dS, (B, H, T_q, T_k, B_q, d) for dQ and (B, H,
    T_k, T_q, B_k, d) for dV, dK. The same numbers `flashref trace --do` writes.

    Returns {"baseline": {"m", "l", "acc"}, "gold": {"m", "l", "acc"}}: the baseline is
    flashref's CPU mirror of Algorithm 1 in the problem's precision (float32 arrays, the
    numbers `flashref trace --out` writes), the gold the same recurrence in float64. Shapes
    (B, H, T_q, T_k, B_q) for m and l, (B, H, T_q, T_k, B_q, d) for acc; with q in the
    course's (B, S, d) layout the H axis is left out. Key tiles a causal kernel skips hold the
    last visited state; rows past S_q hold NaN.

    tile: your kernel's (B_q, B_k), or one int for both (required). select: (b, h) or
    (b, h, i) keeps one head (and one query tile); the arrays then have 1 in those axes. q, k,
    v, do, mask, scale, dtype: as flashref.check.
    """
    from ._check import problem_args, tiles  # the shared argument normalization

    if tile is None:
        raise ValueError("tile: the states are per tile: give your kernel's tile=(B_q, B_k)")
    layout = Layout(q)
    args = problem_args(mask, scale, dtype, None)
    tile_q, tile_k = tiles(tile)
    out = _core.trace_states(layout.tensor(q, "q"), layout.tensor(k, "k"), layout.tensor(v, "v"),
                             None if do is None else layout.tensor(do, "do"), args, tile_q,
                             tile_k, list(select_arg(select)))
    return {kind: {name: layout.from_canonical(a) for name, a in arrays.items()}
            for kind, arrays in out.items()}
