"""flashref's judgement inside pytest: assertions that fail with the report's table and
findings."""

from __future__ import annotations

from typing import Any

from ._check import check
from ._fuzz import FuzzResult, fuzz


def assert_attention_close(q: Any, k: Any, v: Any, **kwargs: Any) -> None:
    """flashref.check(q, k, v, **kwargs); raises AssertionError with the table and the
    findings when a tensor fails (and the first divergence when the states given fail).
    Takes check's keywords (o, lse, do, dq, dk, dv, mask, scale, dtype, allow_tf32, three_tf32,
    lse_dtype, grad_dtype, tile, states, select)."""
    __tracebackhide__ = True  # pytest shows the caller's line
    report = check(q, k, v, **kwargs)
    if not report.passed:
        raise AssertionError("flashref: the kernel's tensors do not match the gold\n" + str(report))


def assert_fuzz(fn: Any, **kwargs: Any) -> FuzzResult:
    """flashref.fuzz(fn, **kwargs); raises AssertionError with the smallest failing problem,
    its report and the lines that reproduce it when fn fails. Returns the result otherwise."""
    __tracebackhide__ = True
    result = fuzz(fn, **kwargs)
    if not result.passed:
        text = [str(result)]
        if result.report is not None:
            text.append(str(result.report))
        raise AssertionError("flashref.fuzz: fn fails\n" + "\n".join(text))
    return result
