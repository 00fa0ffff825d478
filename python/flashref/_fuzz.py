"""flashref.fuzz and flashref.check_function: a Python attention function judged on problems
drawn by flashref's C++ case generator, with RapidCheck's shrinking (flashref._core.fuzz runs
the C++ driver and calls back into _Runner for each case)."""

from __future__ import annotations

import inspect
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import _core
from ._arrays import dtype_name, is_torch
from ._check import _three_tf32, problem_args, tiles  # noqa: F401  (tiles: tile= parsing shared with check)
from ._report import Report

_ALL_MASKS = ("none", "causal", "causal-bottom-right")
_NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16}


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return torch


def _is_function_class(fn: Any) -> bool:
    torch = _torch()
    return (torch is not None and inspect.isclass(fn)
            and issubclass(fn, torch.autograd.Function))


class _Calling:
    """How fn is called: the course's fn(q, k, v, is_causal) (and Function.apply), or with
    mask= and scale= keywords when fn's signature names them."""

    def __init__(self, fn: Any):
        self.function_class = _is_function_class(fn)
        self.call = fn.apply if self.function_class else fn
        self.takes_mask = self.takes_is_causal = self.takes_scale = False
        self.positional_causal = self.function_class
        if self.function_class:
            return
        if not callable(fn):
            raise TypeError(f"fn: must be a callable or a torch.autograd.Function subclass, "
                            f"got {type(fn).__name__}")
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            # No signature to read (a builtin): the course's convention.
            self.positional_causal = True
            return
        self.takes_mask = "mask" in params
        self.takes_is_causal = "is_causal" in params
        self.takes_scale = "scale" in params
        positional = [p for p in params.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        has_varargs = any(p.kind == p.VAR_POSITIONAL for p in params.values())
        if not (self.takes_mask or self.takes_is_causal) and (len(positional) >= 4 or has_varargs):
            self.positional_causal = True

    def masks(self) -> List[str]:
        """The masks fn can be told about."""
        if self.takes_mask:
            return list(_ALL_MASKS)
        if self.takes_is_causal or self.positional_causal:
            return ["none", "causal"]
        return ["none"]

    def __call__(self, q: Any, k: Any, v: Any, mask: str, scale: float) -> Any:
        kwargs: Dict[str, Any] = {}
        if self.takes_scale:
            kwargs["scale"] = scale
        if self.takes_mask:
            return self.call(q, k, v, mask=mask, **kwargs)
        if self.takes_is_causal:
            return self.call(q, k, v, is_causal=mask != "none", **kwargs)
        if self.positional_causal:
            return self.call(q, k, v, mask != "none", **kwargs)
        return self.call(q, k, v, **kwargs)


class _Runner:
    """Called by the C++ driver for each case: builds fn's inputs, calls it, returns its
    tensors in the canonical layout (O, dQ (B, H, S_q, d); L (B, H, S_q); dK, dV (B, H_kv, S_k, d))."""

    def __init__(self, calling: _Calling, array: str, device: Optional[str], layout: str,
                 backward: bool):
        self.calling, self.array, self.device = calling, array, device
        self.course = layout == "bsd"
        self.backward = backward

    def __call__(self, case: Dict[str, Any], inputs: Dict[str, np.ndarray]) -> Dict[str, Any]:
        B, H, H_kv, S_q, S_k, d = (case[x] for x in ("B", "H", "H_kv", "S_q", "S_k", "d"))
        shapes = {"q": (B, H, S_q, d), "k": (B, H_kv, S_k, d), "v": (B, H_kv, S_k, d),
                  "do": (B, H, S_q, d)}
        if self.course:
            # The course's layout has one head: fold the heads into the batch (H_kv == H here).
            shapes = {n: (s[0] * s[1],) + s[2:] for n, s in shapes.items()}
        arrays = {n: inputs[n].reshape(shapes[n]) for n in inputs}
        if self.array == "numpy":
            return self._run_numpy(case, arrays)
        return self._run_torch(case, arrays)

    def _split(self, out: Any):
        if isinstance(out, (tuple, list)):
            if len(out) == 0:
                raise ValueError("fn returned an empty tuple; return O or (O, L)")
            return out[0], (out[1] if len(out) > 1 else None)
        return out, None

    def _canonical(self, x: Any, case: Dict[str, Any], what: str, shape: tuple) -> Any:
        """x (fn's output) in the canonical layout; ValueError naming it for a wrong shape."""
        if is_torch(x):
            x = x.detach()
            x = x.cpu() if x.device.type != "cpu" else x
        elif not isinstance(x, np.ndarray):
            raise TypeError(f"fn's {what} must be an array or a tensor, got {type(x).__name__}")
        want = shape
        if self.course:
            want = (shape[0] * shape[1],) + shape[2:]
        if tuple(x.shape) != want:
            raise ValueError(f"fn's {what} has shape {tuple(x.shape)}, expected {want}")
        return x.reshape(shape)

    def _outputs(self, case: Dict[str, Any], o: Any, lse: Any) -> Dict[str, Any]:
        B, H, S_q, d = case["B"], case["H"], case["S_q"], case["d"]
        out = {"o": self._canonical(o, case, "O", (B, H, S_q, d))}
        if lse is not None:
            out["lse"] = self._canonical(lse, case, "L", (B, H, S_q))
        return out

    def _run_numpy(self, case: Dict[str, Any], arrays: Dict[str, np.ndarray]) -> Dict[str, Any]:
        np_dtype = _NUMPY_DTYPES[case["dtype"]]
        q, k, v = (arrays[n].astype(np_dtype) for n in ("q", "k", "v"))
        o, lse = self._split(self.calling(q, k, v, case["mask"], case["scale"]))
        return self._outputs(case, o, lse)

    def _run_torch(self, case: Dict[str, Any], arrays: Dict[str, np.ndarray]) -> Dict[str, Any]:
        torch = _torch()
        t_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
        backward = self.backward and case["backward"]
        # A Function saves L only when it records a graph: record one to find L.
        graph = backward or self.calling.function_class
        q, k, v = (torch.from_numpy(arrays[n]).to(device=self.device, dtype=t_dtype)
                   .requires_grad_(graph) for n in ("q", "k", "v"))
        with torch.enable_grad() if graph else torch.no_grad():
            o, lse = self._split(self.calling(q, k, v, case["mask"], case["scale"]))
        if lse is None and self.calling.function_class and o.grad_fn is not None:
            lse = _saved_lse(o, q)
        out = self._outputs(case, o, lse)
        if backward:
            if not getattr(o, "requires_grad", False):
                raise ValueError("fn's O does not require grad: it is not differentiable "
                                 "(pass backward=False to judge the forward only)")
            do = torch.from_numpy(arrays["do"]).to(device=self.device, dtype=t_dtype)
            o.backward(do)
            B, H, H_kv, S_q, S_k, d = (case[x] for x in ("B", "H", "H_kv", "S_q", "S_k", "d"))
            for name, t, shape in (("dq", q, (B, H, S_q, d)), ("dk", k, (B, H_kv, S_k, d)),
                                   ("dv", v, (B, H_kv, S_k, d))):
                if t.grad is None:
                    raise ValueError(f"fn's backward gave no gradient for {name[1].upper()}")
                out[name] = self._canonical(t.grad, case, name, shape)
        return out


def _saved_lse(o: Any, q: Any) -> Any:
    """L the way the course's tests find it: the one tensor the Function saved of shape
    (B, S_q) (q's shape without d). None when there is not exactly one."""
    want = tuple(q.shape[:-1])
    found = [t for t in o.grad_fn.saved_tensors if tuple(t.shape) == want]
    return found[0] if len(found) == 1 else None


@dataclass
class FuzzResult:
    """What flashref.fuzz found. `counterexample` is the smallest failing problem (a dict that
    flashref.check_function takes), `report` its Report (None when fn raised on it), `repro` a
    few lines of Python that reproduce it."""

    passed: bool
    cases: int
    counterexample: Optional[Dict[str, Any]]
    report: Optional[Report]
    repro: Optional[str]
    failure: str
    seed: int
    elapsed_s: float
    shrink_steps: int
    unsupported: int
    gave_up: str
    interrupted: bool

    def __str__(self) -> str:
        head = (f"fuzz: {self.cases} cases in {self.elapsed_s:.1f} s (seed {self.seed}): "
                f"{'PASS' if self.passed else 'FAIL'}")
        lines = [head]
        if self.gave_up:
            lines.append(f"gave up: {self.gave_up}")
        if self.interrupted:
            lines.append("interrupted")
        if self.counterexample is not None:
            lines.append(f"smallest failing problem ({self.shrink_steps} shrink steps): "
                         f"{self.counterexample['description']}")
            lines.append(self.failure.rstrip())
            lines.append("reproduce:\n" + self.repro)
        return "\n".join(lines)


def _choose_array(array: Optional[str], calling: _Calling) -> str:
    if array is None:
        return "torch" if (_torch() is not None) else "numpy"
    if array not in ("torch", "numpy"):
        raise ValueError(f"array: must be 'torch' or 'numpy', got {array!r}")
    if array == "torch" and _torch() is None:
        raise ValueError("array: 'torch' needs PyTorch, which is not installed")
    if array == "numpy" and calling.function_class:
        raise ValueError("array: a torch.autograd.Function takes torch tensors, not 'numpy'")
    return array


def _choose_device(device: Any, array: str) -> Optional[str]:
    if array == "numpy":
        if device not in (None, "cpu"):
            raise ValueError(f"device: numpy arrays live on the CPU, got {device!r}")
        return None
    torch = _torch()
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def _choose_layout(layout: Optional[str], calling: _Calling) -> str:
    if layout is None:
        return "bsd" if calling.function_class else "bhsd"
    if layout not in ("bsd", "bhsd"):
        raise ValueError(f"layout: must be 'bsd' (the course's (B, S, d)) or 'bhsd', got {layout!r}")
    return layout


class _Settings:
    """The keywords fuzz and check_function share, checked once."""

    def __init__(self, fn: Any, array, device, layout, backward, tile, allow_tf32, lse_dtype,
                 three_tf32=False):
        self.calling = _Calling(fn)
        self.array = _choose_array(array, self.calling)
        self.device = _choose_device(device, self.array)
        self.layout = _choose_layout(layout, self.calling)
        if not isinstance(backward, bool):
            raise TypeError(f"backward: must be a bool, got {backward!r}")
        # numpy arrays carry no gradients: the forward only.
        self.backward = backward and self.array == "torch"
        if tile is None:
            self.tile = None
        else:
            self.tile = tiles(tile)
        if not isinstance(allow_tf32, bool):
            raise TypeError(f"allow_tf32: must be a bool, got {allow_tf32!r}")
        self.allow_tf32 = allow_tf32
        self.three_tf32 = _three_tf32(three_tf32, allow_tf32)
        self.lse_dtype = "f32" if lse_dtype is None else dtype_name(lse_dtype, "lse_dtype")
        self.runner = _Runner(self.calling, self.array, self.device, self.layout, self.backward)

    def keywords(self) -> str:
        """The keywords that reproduce these settings, for the repro."""
        parts = [f"array={self.array!r}", f"layout={self.layout!r}"]
        if self.device is not None:
            parts.append(f"device={self.device!r}")
        if self.tile is not None:
            parts.append(f"tile={self.tile!r}")
        if self.allow_tf32:
            parts.append("allow_tf32=True")
        if self.three_tf32:
            parts.append("three_tf32=True")
        if self.lse_dtype != "f32":
            parts.append(f"lse_dtype={self.lse_dtype!r}")
        if not self.backward and self.array == "torch":
            parts.append("backward=False")
        return ", ".join(parts)


def _int_list(values: Optional[Sequence[int]], name: str) -> List[int]:
    if values is None:
        return []
    try:
        out = [int(x) for x in values]
    except (TypeError, ValueError):
        raise TypeError(f"{name}: must be a list of ints, got {values!r}") from None
    if not out:
        raise ValueError(f"{name}: is empty; give one or more (or leave it out)")
    return out


def _progress_printer():
    def show(cases: int, failures: int, shrink_steps: int, elapsed_s: float, shrinking: bool):
        rate = cases / elapsed_s if elapsed_s > 0 else 0.0
        line = f"\rfuzz: {cases} cases, {failures} failures, {rate:.1f} cases/s, {elapsed_s:.1f} s"
        if shrinking:
            line += f"; shrinking: {shrink_steps} steps"
        sys.stderr.write(line + "   ")
        sys.stderr.flush()
    return show


def fuzz(fn: Any, *, seconds: Optional[float] = None, max_cases: Optional[int] = None,
         dtypes: Optional[Sequence[Any]] = None, masks: Optional[Sequence[str]] = None,
         max_seq: int = 160, head_dims: Optional[Sequence[int]] = None,
         gqa: Optional[bool] = None, backward: bool = True, seed: Optional[int] = None,
         array: Optional[str] = None, device: Any = None, layout: Optional[str] = None,
         tile: Any = None, allow_tf32: bool = False, lse_dtype: Any = None,
         progress: Optional[bool] = None, three_tf32: bool = False) -> FuzzResult:
    """Judges fn on problems drawn by flashref's case generator (biased to awkward shapes:
    S = 1, S a multiple of the tile plus or minus one, S_q != S_k, odd d, GQA, fully masked
    rows, large inputs), until max_cases cases (default 100) or `seconds`, and shrinks the
    first failure to the smallest problem that still fails. Does not raise for a failing fn:
    see the result's passed, counterexample, report and repro (testing.assert_fuzz raises).

    fn is called fn(q, k, v, is_causal) (the course's convention; also Function.apply), or
    with mask= and scale= when its signature names them; it returns O or (O, L). A
    torch.autograd.Function subclass's L is the one (B, S_q) tensor it saved.
    array: 'torch' (default when torch imports; tensors on `device`, gradients by autograd when
    backward) or 'numpy' (forward only). layout: 'bsd' (the course's (B, S, d); the default for
    a Function) or 'bhsd'. tile: fn's (B_q, B_k): sequence lengths are drawn around its
    multiples. allow_tf32, three_tf32, lse_dtype: the precision fn was written for, as in check.
    NotImplementedError from fn discards the case.
    """
    s = _Settings(fn, array, device, layout, backward, tile, allow_tf32, lse_dtype, three_tf32)
    args = _core.FuzzArgs()
    if seconds is None and max_cases is None:
        max_cases = 100
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"seconds: must be a number > 0, got {seconds!r}")
        args.seconds = float(seconds)
    if max_cases is not None:
        if isinstance(max_cases, bool) or not isinstance(max_cases, int) or max_cases < 1:
            raise ValueError(f"max_cases: must be an int >= 1, got {max_cases!r}")
        args.cases = max_cases
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: must be an int >= 0, got {seed!r}")
    args.seed = seed
    default_dtypes = ["f32", "f16"] if s.array == "numpy" else ["f32", "f16", "bf16"]
    dtype_list = default_dtypes if dtypes is None else [dtype_name(t, "dtypes") for t in dtypes]
    if s.array == "numpy" and "bf16" in dtype_list:
        raise ValueError("dtypes: numpy has no bfloat16; use array='torch' for it")
    args.dtypes = dtype_list
    can = s.calling.masks()
    if masks is None:
        masks = can
    else:
        masks = list(masks)
        for m in masks:
            if m not in _ALL_MASKS:
                raise ValueError(f"masks: unknown mask {m!r} (expected one of {list(_ALL_MASKS)})")
            if m not in can:
                raise ValueError(f"masks: fn cannot be told about {m!r}: it takes "
                                 f"{'is_causal' if len(can) > 1 else 'no mask'}; give it a mask= "
                                 f"keyword argument to fuzz every mask")
    args.masks = masks
    if isinstance(max_seq, bool) or not isinstance(max_seq, int):
        raise TypeError(f"max_seq: must be an int, got {max_seq!r}")
    args.max_seq = max_seq
    args.head_dims = _int_list(head_dims, "head_dims")
    if gqa is None:
        gqa = s.layout == "bhsd"
    if gqa and s.layout == "bsd":
        raise ValueError("gqa: the course's (B, S, d) layout has one head; use layout='bhsd'")
    args.gqa = bool(gqa)
    args.other_scales = s.calling.takes_scale
    args.backward = s.backward
    if s.tile is not None:
        args.tile_q, args.tile_k = s.tile
    args.allow_tf32 = s.allow_tf32
    args.three_tf32 = s.three_tf32
    args.lse_dtype = s.lse_dtype
    show = progress if progress is not None else sys.stderr.isatty()
    out = _core.fuzz(s.runner, args, _progress_printer() if show else None)
    if show:
        sys.stderr.write("\n")
    counterexample = out.minimal
    repro = None
    if counterexample is not None:
        case = {k: v for k, v in counterexample.items() if k != "description"}
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
        repro = ("import flashref\n"
                 f"case = {case!r}\n"
                 f"report = flashref.check_function({name}, case, {s.keywords()})\n"
                 "print(report)\n")
    return FuzzResult(passed=out.passed, cases=out.cases, counterexample=counterexample,
                      report=Report(out.report) if out.report is not None else None,
                      repro=repro, failure=out.failure, seed=seed, elapsed_s=out.elapsed_s,
                      shrink_steps=out.shrink_steps, unsupported=out.unsupported,
                      gave_up=out.gave_up, interrupted=out.interrupted)


def check_function(fn: Any, case: Optional[Dict[str, Any]] = None, *, array: Optional[str] = None,
                   device: Any = None, layout: Optional[str] = None, backward: bool = True,
                   tile: Any = None, allow_tf32: bool = False, lse_dtype: Any = None,
                   three_tf32: bool = False, **problem: Any) -> Report:
    """Judges fn on one problem: `case` (a fuzz counterexample, or a dict with B, H, H_kv, S_q,
    S_k, d, mask, dtype, scale, seed, large) and/or those keys as keywords (they override
    `case`). Inputs are flashref's seeded ones, the same a fuzz case of that seed gets; fn is
    called as fuzz calls it. fn's exceptions reach the caller."""
    s = _Settings(fn, array, device, layout, backward, tile, allow_tf32, lse_dtype, three_tf32)
    merged: Dict[str, Any] = {"B": 1, "H": 1, "S_q": 128, "d": 64, "mask": "none", "dtype": "f32",
                              "seed": 0}
    if case is not None:
        if not isinstance(case, dict):
            raise TypeError(f"case: must be a dict, got {type(case).__name__}")
        merged.update({k: v for k, v in case.items() if k != "description"})
    merged.update(problem)
    known = {"B", "H", "H_kv", "S_q", "S_k", "d", "mask", "dtype", "scale", "seed", "large", "backward"}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise TypeError(f"check_function: unknown problem keys {unknown} (known: {sorted(known)})")
    merged["dtype"] = dtype_name(merged["dtype"], "dtype")
    if s.array == "numpy" and merged["dtype"] == "bf16":
        raise ValueError("dtype: numpy has no bfloat16; use array='torch' for it")
    if merged["mask"] not in s.calling.masks():
        raise ValueError(f"mask: fn cannot be told about {merged['mask']!r}")
    if s.layout == "bsd" and merged.get("H_kv", merged["H"]) != merged["H"]:
        raise ValueError("H_kv: the course's (B, S, d) layout has no grouped-query attention")
    scale = merged.get("scale")
    if scale is not None and not s.calling.takes_scale and scale != 1 / math.sqrt(merged["d"]):
        raise ValueError(f"scale: fn takes no scale= argument, so only 1/sqrt(d) fits, got {scale!r}")
    merged["backward"] = s.backward and bool(merged.get("backward", True))
    tile_q, tile_k = s.tile if s.tile is not None else tiles(None)
    return Report(_core.check_case(s.runner, merged, s.allow_tf32, s.three_tf32, s.lse_dtype,
                                    tile_q, tile_k))
