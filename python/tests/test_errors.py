"""Bad input raises ValueError or TypeError naming the argument, before any work."""

import numpy as np
import pytest

import flashref
from kernels import flash_forward, inputs


@pytest.fixture
def case():
    q, k, v, do = inputs(1, 2, 1, 20, 20, 8)
    o, lse = flash_forward(q, k, v)
    return q, k, v, do, o, lse


def test_bad_check_arguments_name_themselves(case):
    q, k, v, do, o, lse = case
    bad = [
        (dict(q=q, k=k[:, :, :, :4], v=v, o=o), ValueError, "k"),
        (dict(q=q, k=k, v=v[:, :, :5], o=o), ValueError, "v"),
        (dict(q=q, k=k, v=v, o=o[:, :, :5]), ValueError, "o"),
        (dict(q=q, k=k, v=v, o=o, lse=lse[:, :, :5]), ValueError, "lse"),
        (dict(q=q, k=k, v=v, o=o, dq=o), ValueError, "do"),
        (dict(q=q, k=k, v=v, o=o, mask="upper"), ValueError, "mask"),
        (dict(q=q, k=k, v=v, o=o, mask=True), TypeError, "mask"),
        (dict(q=q, k=k, v=v, o=o, tile=(0, 16)), ValueError, "tile"),
        (dict(q=q, k=k, v=v, o=o, tile="big"), TypeError, "tile"),
        (dict(q=q, k=k, v=v, o=o, lse_dtype="int8"), ValueError, "lse_dtype"),
        (dict(q=q, k=k, v=v, o=o, dtype="f64"), ValueError, "dtype"),
        (dict(q=q, k=k, v=v, o=o, scale="x"), TypeError, "scale"),
        (dict(q=q, k=k, v=v, o=o, allow_tf32=1), TypeError, "allow_tf32"),
        (dict(q=q, k=k, v=v, o=o, three_tf32=1), TypeError, "three_tf32"),
        (dict(q=q, k=k, v=v, o=o, three_tf32=True, allow_tf32=True), ValueError, "three_tf32"),
        (dict(q=q.tolist(), k=k, v=v, o=o), ValueError, "q"),
        (dict(q=q, k=k.tolist(), v=v, o=o), TypeError, "k"),
        (dict(q=q, k=k.astype(np.float16), v=v, o=o), TypeError, "k"),
        (dict(q=q.astype(np.float64), k=k.astype(np.float64), v=v.astype(np.float64), o=o), TypeError, "q"),
        (dict(q=q.astype(np.int32), k=k.astype(np.int32), v=v.astype(np.int32), o=o), TypeError, "q"),
        (dict(q=q, k=k, v=v, o=o.astype(np.int64)), TypeError, "o"),
        (dict(q=q, k=k, v=v), ValueError, "o"),
        (dict(q=q[0, 0], k=k, v=v, o=o), ValueError, "q"),
        (dict(q=q, k=k[:, :, :, :], v=v, o=o[:, 0]), ValueError, "o"),
    ]
    for kwargs, error, name in bad:
        with pytest.raises(error) as e:
            flashref.check(**kwargs)
        assert str(e.value).startswith(name + ":"), (name, str(e.value))


def test_heads_that_do_not_divide_are_refused(case):
    q, k, v, do, o, lse = case
    k3, v3 = (np.concatenate([x, x, x], axis=1) for x in (k, v))  # 3 kv heads, 2 query heads
    with pytest.raises(ValueError, match="^k:"):
        flashref.check(q, k3, v3, o=o)


def test_float64_inputs_are_rounded_to_the_dtype_given(case):
    q, k, v, do, o, lse = case
    report = flashref.check(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                            o=o, lse=lse, dtype="float32")
    assert report.passed, str(report)


def test_bad_fuzz_arguments_name_themselves():
    def kernel(q, k, v, is_causal):
        return flash_forward(q, k, v, "causal" if is_causal else "none")

    bad = [
        (dict(array="numpy", dtypes=["bf16"]), ValueError, "dtypes"),
        (dict(array="numpy", masks=["causal-bottom-right"]), ValueError, "masks"),
        (dict(array="numpy", masks=["diagonal"]), ValueError, "masks"),
        (dict(array="numpy", masks=[]), ValueError, "masks"),
        (dict(array="numpy", max_cases=0), ValueError, "max_cases"),
        (dict(array="numpy", seconds=-1), ValueError, "seconds"),
        (dict(array="numpy", seed=-3), ValueError, "seed"),
        (dict(array="numpy", max_seq=0), ValueError, "max_seq"),
        (dict(array="numpy", head_dims=[0]), ValueError, "head_dims"),
        (dict(array="numpy", head_dims="x"), TypeError, "head_dims"),
        (dict(array="jax"), ValueError, "array"),
        (dict(array="numpy", layout="bshd"), ValueError, "layout"),
        (dict(array="numpy", layout="bsd", gqa=True), ValueError, "gqa"),
        (dict(array="numpy", device="cuda"), ValueError, "device"),
        (dict(array="numpy", tile=(16,)), TypeError, "tile"),
        (dict(array="numpy", lse_dtype="int8"), ValueError, "lse_dtype"),
    ]
    for kwargs, error, name in bad:
        with pytest.raises(error) as e:
            flashref.fuzz(kernel, progress=False, **kwargs)
        assert str(e.value).startswith(name + ":"), (name, str(e.value))
    with pytest.raises(TypeError, match="^fn:"):
        flashref.fuzz(42, array="numpy")


def test_plan_says_which_kernels_and_why():
    # Host backends have one way to run a problem; cuda names its family and the reason (without
    # a GPU it has no choice to explain). A bad problem or backend is a ValueError naming it.
    assert flashref.plan("cpu", (1, 2, 64, 64, 64)) == ""
    if "cuda" in flashref.backends():
        d256 = flashref.plan("cuda", (1, 1, 16, 16, 256), dtype="bf16")
        assert (d256 == "" or d256.startswith("sm80: ")
                or (d256.startswith("sm90: ") and "backward on mma.sync" in d256)), d256
    with pytest.raises(ValueError, match="backend"):
        flashref.plan("tpu", (1, 1, 16, 16, 64))
    with pytest.raises(ValueError, match="mask"):
        flashref.plan("cpu", (1, 1, 16, 16, 64), mask="upper")
    with pytest.raises(ValueError):
        flashref.plan("cpu", (1, 3, 16, 16, 64), heads_kv=2)  # H not a multiple of H_kv
