"""The torch layer on the CPU: flashref.attention against the gold, gradcheck in float64,
check on torch tensors, the course's Function, fuzz with autograd, its eager path against its
custom ops (on CUDA too where there is a GPU) and under torch.compile. Skipped without torch (it
runs on the GPU machine: scripts/device-run python)."""

import contextlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; scripts/device-run python runs these")

import flashref  # noqa: E402
from kernels import flash_forward, inputs  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available() or "cuda" not in flashref.backends(),
                          reason="no CUDA GPU here, or flashref built without its cuda backend")


def naive(q, k, v, is_causal=False, mask=None, scale=None):
    """Attention in torch ops (differentiable), (B, H, S, d) with GQA, or the course's 3-D."""
    course = q.ndim == 3
    if course:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    mask = mask or ("causal" if is_causal else "none")
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Scores and O accumulate in float32 at least, as FlashAttention does (a bf16 matmul on the CPU
    # rounds S itself to bf16, which no correct kernel does).
    acc = torch.promote_types(q.dtype, torch.float32)
    s = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale
    S_q, S_k = q.shape[2], k.shape[2]
    if mask != "none":
        shift = 0 if mask == "causal" else S_k - S_q
        keep = torch.arange(S_k)[None, :] <= torch.arange(S_q)[:, None] + shift
        s = s.masked_fill(~keep.to(s.device), float("-inf"))
    # Softmax as FlashAttention computes it: P~ = exp(S - m) with the row max m, O = P~ V / l,
    # L = m + log l. (exp(S - logsumexp(S)) loses |L| x eps in every exponent: with scores in the
    # hundreds that is more than a kernel's error, and the rule rightly fails it.)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # a row that sees no key
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = ((p @ v.to(acc)) / torch.where(l > 0, l, torch.ones_like(l))).to(v.dtype)
    lse = (m + torch.log(l)).squeeze(-1)
    return (o[:, 0], lse[:, 0]) if course else (o, lse)


@pytest.mark.parametrize("mask", ["none", "causal", "causal-bottom-right"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (3, 1)])
def test_attention_on_cpu_matches_the_gold(mask, heads):
    H, H_kv = heads
    q, k, v, do = (torch.from_numpy(x) for x in inputs(2, H, H_kv, 37, 50, 16, seed=1))
    qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
    o = flashref.attention(qs, ks, vs, mask=mask)
    o.backward(do)
    report = flashref.check(q, k, v, o=o, do=do, dq=qs.grad, dk=ks.grad, dv=vs.grad, mask=mask)
    assert report.passed, str(report)


def test_attention_takes_the_course_layout_and_strided_inputs():
    q, k, v, do = (torch.from_numpy(x) for x in inputs(1, 4, 4, 40, 40, 16, seed=2))
    # (B, S, H, d) memory viewed as (B, H, S, d): no copy on the way in.
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    assert not qt.is_contiguous()
    o = flashref.attention(qt, kt, vt, is_causal=True)
    assert flashref.check(q, k, v, o=o, mask="causal").passed
    o3 = flashref.attention(q[:, 0], k[:, 0], v[:, 0], is_causal=True)
    assert o3.shape == q[:, 0].shape
    assert flashref.check(q[:, 0], k[:, 0], v[:, 0], o=o3, mask="causal").passed


@pytest.mark.parametrize("mask", ["none", "causal", "causal-bottom-right"])
def test_gradcheck_in_float64(mask):
    torch.manual_seed(0)
    q = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: flashref.attention(a, b, c, mask=mask), (q, k, v))


def test_deterministic_false_is_an_option_checked_against_torchs_own_switch():
    q, k, v, do = (torch.from_numpy(x) for x in inputs(1, 2, 1, 30, 30, 16, seed=3))
    grads = []
    for deterministic in (True, False):
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
        flashref.attention(qs, ks, vs, is_causal=True, deterministic=deterministic).backward(do)
        grads.append((qs.grad, ks.grad, vs.grad))
    # The cpu backend is deterministic either way: the same bits.
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    with pytest.raises(TypeError, match="^deterministic:"):
        flashref.attention(q, k, v, deterministic=1)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="use_deterministic_algorithms"):
            flashref.attention(q, k, v, deterministic=False)
        assert flashref.attention(q, k, v, deterministic=True).shape == q.shape
    finally:
        torch.use_deterministic_algorithms(False)


def test_bad_attention_input_names_the_argument():
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="^k:"):
        flashref.attention(q, torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8))
    with pytest.raises(TypeError, match="^v:"):
        flashref.attention(q, q, q.half())
    with pytest.raises(ValueError, match="^mask:"):
        flashref.attention(q, q, q, mask="diagonal")
    with pytest.raises(ValueError, match="^mask:"):
        flashref.attention(q, q, q, mask="causal", is_causal=True)
    with pytest.raises(TypeError, match="^q:"):
        flashref.attention(q.int(), q.int(), q.int())


def test_check_on_torch_tensors_names_planted_mistakes():
    for code, mask in (("no_scale", "none"), ("mask_ignored", "causal"), ("lse_base2", "none")):
        q, k, v, _ = inputs(1, 2, 1, 100, 100, 16, seed=7)
        o, lse = flash_forward(q, k, v, mask, mistakes=frozenset({code}))
        report = flashref.check(*(torch.from_numpy(x) for x in (q, k, v)), o=torch.from_numpy(o),
                                lse=torch.from_numpy(lse), mask=mask)
        assert code in report.codes, str(report)
    # bfloat16 tensors, which numpy cannot hold.
    q, k, v = (torch.randn(1, 2, 64, 32).bfloat16() for _ in range(3))
    o, lse = naive(q, k, v)
    assert flashref.check(q, k, v, o=o, lse=lse).passed


def test_the_course_function_saves_lse_where_the_course_looks():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 64, 16, requires_grad=True) for _ in range(3))
    o = flashref.FlashAttentionFunction.apply(q, k, v, True)
    saved = [t for t in o.grad_fn.saved_tensors if t.shape == (2, 64)]
    assert len(saved) == 1
    o_ref, lse_ref = naive(q, k, v, is_causal=True)
    torch.testing.assert_close(saved[0], lse_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(o, o_ref, rtol=1e-4, atol=1e-4)


def test_fuzz_with_autograd_passes_flashrefs_own_function_and_a_torch_reference():
    result = flashref.fuzz(flashref.FlashAttentionFunction, max_cases=15, seed=1, device="cpu",
                           progress=False)
    assert result.passed, str(result)

    def reference(q, k, v, mask, scale):
        return naive(q, k, v, mask=mask, scale=scale)

    # Not bottom-right: this reference's gradients of fully masked rows are NaN (exp(-inf + inf)).
    result = flashref.fuzz(reference, max_cases=15, seed=2, device="cpu", dtypes=["float32"],
                           masks=["none", "causal"], progress=False)
    assert result.passed, str(result)


def test_fuzz_finds_a_wrong_backward():
    class NoScaleInDq(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, is_causal=False):
            o, lse = naive(q, k, v, is_causal=is_causal)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.is_causal = is_causal
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            with torch.enable_grad():
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                oo, _ = naive(qq, kk, vv, is_causal=ctx.is_causal)
                dq, dk, dv = torch.autograd.grad(oo, (qq, kk, vv), do)
            return dq * math.sqrt(q.shape[-1]), dk, dv, None

    result = flashref.fuzz(NoScaleInDq, max_cases=30, seed=3, device="cpu", dtypes=["float32"],
                           progress=False)
    assert not result.passed
    assert result.report is not None and "dq_scale" in result.report.codes, str(result.report)


# --- The eager path (an autograd.Function calling flashref._core) against the custom ops
# (what torch.compile, make_fx and every dispatch mode see): the same _core calls, the same bits.
class _SeesOps(TorchDispatchMode):
    """Records the ops the dispatcher runs. Like any dispatch mode (a tracer's, FlopCounterMode),
    it sends flashref.attention through its custom ops."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _attention_both_ways(q, k, v, do, **kwargs):
    """O, L, dQ, dK, dV of flashref.attention on the eager path and through the custom ops."""
    results = []
    for mode in (None, _SeesOps()):
        qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
        with mode or contextlib.nullcontext():
            o = flashref.attention(qs, ks, vs, **kwargs)
            # L is not an output: the autograd node saves it, the one (B, H, S_q) tensor.
            lse, = (t for t in o.grad_fn.saved_tensors if t.shape == o.shape[:-1])
            o.backward(do)
        if mode is None:
            assert type(o.grad_fn).__name__ == "_AttentionBackward", "not the eager path"
        else:
            assert {"flashref.attention_forward.default",
                    "flashref.attention_backward.default"} <= set(mode.ops), mode.ops
        results.append((o, lse, qs.grad, ks.grad, vs.grad))
    return results


def _strided(x, layout):
    """x itself, or x's values in (B, S, H, d) memory seen as (B, H, S, d) with a row stride of
    d + 1 (on CUDA not a whole number of 16 bytes: the one copy)."""
    if layout == "contiguous":
        return x
    B, H, S, d = x.shape
    wide = x.new_zeros(B, S, H, d + 1)
    wide[..., :d] = x.transpose(1, 2)
    return wide[..., :d].transpose(1, 2)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64],
                         ids=lambda t: str(t)[6:])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_the_eager_path_and_the_custom_ops_give_the_same_bits(device, dtype, layout):
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("float64 is the gold's, on the CPU only")
    for mask, heads, deterministic in (("none", (2, 2), True), ("causal", (4, 2), True),
                                       ("causal-bottom-right", (3, 1), True),
                                       ("causal", (4, 2), False)):
        q, k, v, do = (_strided(torch.from_numpy(x).to(device=device, dtype=dtype), layout)
                       for x in inputs(2, *heads, 37, 50, 16, seed=4))
        eager, ops = _attention_both_ways(q, k, v, do, mask=mask, deterministic=deterministic)
        if deterministic or device == "cpu":  # the atomic backward's dQ may change run to run
            for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), eager, ops):
                assert torch.equal(a, b), f"{name} differs ({mask}, H {heads})"
        # No autograd: _core without even the autograd.Function.
        with torch.no_grad():
            assert torch.equal(flashref.attention(q, k, v, mask=mask), eager[0])
        assert torch.equal(flashref.attention(q, k, v, mask=mask), eager[0])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_the_course_function_gives_the_same_bits_both_ways(device):
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(2, 40, 16, device=device) for _ in range(4))
    results = []
    for mode in (None, _SeesOps()):
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
        with mode or contextlib.nullcontext():
            o = flashref.FlashAttentionFunction.apply(qs, ks, vs, True)
            lse, = (t for t in o.grad_fn.saved_tensors if t.shape == (2, 40))
            o.backward(do)
        assert mode is None or "flashref.attention_backward.default" in mode.ops
        results.append((o, lse, qs.grad, ks.grad, vs.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_double_backward_is_refused_as_before():
    # The backward's own backward is not implemented: create_graph=True runs the custom op,
    # which has no autograd formula, so differentiating dQ raises rather than being wrong.
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dq, = torch.autograd.grad(flashref.attention(q, k, v).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="attention_backward"):
        dq.sum().backward()


def test_torch_compile_traces_the_custom_ops_and_gives_the_eager_bits():
    # Dynamo and AOTAutograd must meet the custom ops, not the eager path's call into _core
    # (fullgraph: that would be a graph break, an error); aot_eager runs what they traced.
    # Inductor is test_cuda.py's: on the CPU its first compile takes a minute there.
    q, k, v, _ = (torch.from_numpy(x) for x in inputs(1, 4, 2, 37, 50, 16, seed=5))

    def step(q, k, v):
        return (flashref.attention(q, k, v, mask="causal-bottom-right") * 2).sum()

    grads = []
    for fn in (torch.compile(step, fullgraph=True, backend="aot_eager"), step):
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
        fn(qs, ks, vs).backward()
        grads.append((qs.grad, ks.grad, vs.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    o = torch.compile(lambda a, b, c: flashref.attention(a, b, c, is_causal=True),
                      fullgraph=True, backend="aot_eager")(q, k, v)
    assert torch.equal(o, flashref.attention(q, k, v, is_causal=True))
