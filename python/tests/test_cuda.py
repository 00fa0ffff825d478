"""flashref.attention on CUDA tensors, a Triton kernel judged by flashref.fuzz, and the
course's tests passed by flashref's Function. Runs on the GPU machine (scripts/device-run
python); skipped elsewhere."""

import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; scripts/device-run python runs these")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here; scripts/device-run python runs these", allow_module_level=True)
if "cuda" not in __import__("flashref").backends():
    pytest.skip("this flashref was built without the CUDA backend", allow_module_level=True)

import flashref  # noqa: E402
from flashref._torch import attention_forward  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
MASKS = ["none", "causal", "causal-bottom-right"]
HEADS = [(4, 4), (4, 2), (4, 1)]


def judged(q, k, v, mask, **attention_kwargs):
    """Runs flashref.attention forward and backward on CUDA and judges O, L, dQ, dK, dV."""
    torch.manual_seed(1)
    do = torch.randn_like(q)
    qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = flashref.attention(qs, ks, vs, mask=mask, **attention_kwargs)
    o.backward(do)
    _, lse = attention_forward(q.unsqueeze(1) if q.ndim == 3 else q,
                               k.unsqueeze(1) if k.ndim == 3 else k,
                               v.unsqueeze(1) if v.ndim == 3 else v, mask,
                               1 / math.sqrt(q.shape[-1]))
    if q.ndim == 3:
        lse = lse[:, 0]
    return flashref.check(q, k, v, o=o, lse=lse, do=do, dq=qs.grad, dk=ks.grad, dv=vs.grad,
                          mask=mask)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: str(t)[6:])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"H{h[0]}_Hkv{h[1]}")
def test_attention_on_cuda_matches_the_gold(dtype, mask, heads):
    H, H_kv = heads
    torch.manual_seed(0)
    q = torch.randn(2, H, 200, 64, device="cuda", dtype=dtype)
    k = torch.randn(2, H_kv, 170, 64, device="cuda", dtype=dtype)
    v = torch.randn(2, H_kv, 170, 64, device="cuda", dtype=dtype)
    report = judged(q, k, v, mask)
    assert report.passed, str(report)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=lambda t: str(t)[6:])
@pytest.mark.parametrize("mask", MASKS)
def test_the_atomic_backward_passes_the_rule(dtype, mask):
    torch.manual_seed(0)
    q = torch.randn(2, 4, 700, 64, device="cuda", dtype=dtype)
    k = torch.randn(2, 2, 650, 64, device="cuda", dtype=dtype)
    v = torch.randn(2, 2, 650, 64, device="cuda", dtype=dtype)
    report = judged(q, k, v, mask, deterministic=False)
    assert report.passed, str(report)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: str(t)[6:])
def test_non_contiguous_inputs(dtype):
    torch.manual_seed(0)
    # FlashAttention's (B, S, H, d) memory seen as (B, H, S, d), and a slice of a wider head.
    q = torch.randn(2, 150, 4, 64, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(2, 130, 2, 64, device="cuda", dtype=dtype).transpose(1, 2)
    v = torch.randn(2, 2, 130, 128, device="cuda", dtype=dtype)[..., 32:96]
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    report = judged(q, k, v, "causal")
    assert report.passed, str(report)


def test_course_layout_on_cuda():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 100, 64, device="cuda") for _ in range(3))
    report = judged(q, k, v, "causal")
    assert report.passed, str(report)


@pytest.mark.parametrize("mask", MASKS)
def test_torch_compile_fullgraph(mask):
    torch.manual_seed(0)
    q = torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step(q, k, v):
        return (flashref.attention(q, k, v, mask=mask) * 2).sum()

    compiled = torch.compile(step, fullgraph=True)
    compiled(q, k, v).backward()
    o = torch.compile(lambda a, b, c: flashref.attention(a, b, c, mask=mask), fullgraph=True)(q, k, v)
    # The loss is sum(2 O): dO = 2 everywhere.
    report = flashref.check(q, k, v, o=o, do=torch.full_like(o, 2), dq=q.grad, dk=k.grad,
                            dv=v.grad, mask=mask)
    assert report.passed, str(report)


def test_a_non_default_stream():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # Work queued ahead on the side stream: flashref must run after it, on that stream.
        big = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        for _ in range(5):
            big = big @ big * 1e-3
        o = flashref.attention(q, k, v, is_causal=True)
        done = torch.cuda.Event()
        done.record(side)
    done.synchronize()
    assert flashref.check(q, k, v, o=o, mask="causal").passed


# --- The course's tests, with flashref's Function as the implementation under test.
def _course_reference(q, k, v, is_causal):
    S = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        n = q.shape[-2]
        S = S.masked_fill(torch.triu(torch.ones(n, n, device=q.device, dtype=torch.bool), 1), float("-inf"))
    L = torch.logsumexp(S, -1)
    return torch.softmax(S, -1) @ v, L


@pytest.mark.parametrize("is_causal", [False, True])
def test_course_semantics(is_causal):
    torch.manual_seed(0)
    B, S, d = 4, 128, 64
    q, k, v, do = (torch.randn(B, S, d, device="cuda", dtype=torch.float32) for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_()
    o = flashref.FlashAttentionFunction.apply(q, k, v, is_causal)
    lse = [t for t in o.grad_fn.saved_tensors if t.shape == (B, S)]
    assert len(lse) == 1, "L must be the one saved tensor of shape (B, S_q)"
    o.backward(do)
    grads = [x.grad.clone() for x in (q, k, v)]
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o_ref, lse_ref = _course_reference(qr, kr, vr, is_causal)
    o_ref.backward(do)
    torch.testing.assert_close(o, o_ref, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(lse[0], lse_ref, rtol=1e-2, atol=1e-2)
    for g, r in zip(grads, (qr.grad, kr.grad, vr.grad)):
        torch.testing.assert_close(g, r, rtol=1e-2, atol=1e-2)


# --- A Triton kernel judged through flashref.fuzz, with TF32 on and then off.
def test_a_triton_kernel_with_tf32_on_then_off():
    triton_kernel = pytest.importorskip("triton_kernel", reason="Triton is not installed")
    tf32 = triton_kernel.make(precision="tf32")
    ieee = triton_kernel.make(precision="ieee")
    common = dict(max_cases=60, seed=11, dtypes=["float32"], head_dims=[16, 32, 64], tile=(32, 32),
                  layout="bsd", backward=False, progress=False)
    # TF32 left on: judged as float32 it fails, and the finding says TF32.
    r = flashref.fuzz(tf32, **common)
    assert not r.passed, str(r)
    assert r.report is not None and "tf32_matmul" in r.report.codes, str(r.report)
    # Judged in the precision it was written for, it passes.
    r = flashref.fuzz(tf32, allow_tf32=True, **common)
    assert r.passed, str(r)
    # TF32 off: passes as float32.
    r = flashref.fuzz(ieee, **common)
    assert r.passed, str(r)
    # bf16 and f16 too (TF32 does not apply to them).
    r = flashref.fuzz(ieee, **{**common, "dtypes": ["bfloat16", "float16"]})
    assert r.passed, str(r)


def test_rows_the_kernels_cannot_load_in_place_are_copied_once():
    torch.manual_seed(0)
    # A row stride of 65 elements: not a whole number of 16 bytes, so flashref copies.
    q, k, v = (torch.randn(1, 2, 96, 65, device="cuda", dtype=torch.bfloat16)[..., :64] for _ in range(3))
    report = judged(q, k, v, "causal")
    assert report.passed, str(report)
