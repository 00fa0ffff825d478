"""flashref.check on numpy arrays: a correct kernel passes, and each finding code is planted
through a small numpy kernel with that mistake (kernels.py) and found."""

import json
import math

import numpy as np
import pytest

import flashref
from kernels import attention_backward, flash_forward, inputs

F32 = np.float32


def forward_case(B=1, H=2, H_kv=1, S_q=100, S_k=100, d=16, mask="none", seed=7, **kernel):
    q, k, v, do = inputs(B, H, H_kv, S_q, S_k, d, seed)
    o, lse = flash_forward(q, k, v, mask, **kernel)
    return q, k, v, do, o, lse


def test_a_correct_kernel_passes_with_no_findings():
    for mask in ("none", "causal", "causal-bottom-right"):
        for S_q, S_k in ((100, 100), (130, 100), (70, 100)):
            q, k, v, do, o, lse = forward_case(S_q=S_q, S_k=S_k, mask=mask)
            report = flashref.check(q, k, v, o=o, lse=lse, mask=mask)
            assert report.passed, str(report)
            assert report.findings == []
            assert set(report.tensors) == {"O", "L"}
            assert all(t.passed for t in report.tensors.values())


def test_a_correct_backward_passes():
    q, k, v, do, o, lse = forward_case(H=4, H_kv=2, mask="causal")
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, "causal")
    report = flashref.check(q, k, v, o=o, lse=lse, do=do, dq=dq, dk=dk, dv=dv, mask="causal")
    assert report.passed, str(report)
    assert set(report.tensors) == {"O", "L", "dQ", "dK", "dV"}


def test_the_course_layout_is_three_dimensional():
    q, k, v, do, o, lse = forward_case(B=1, H=1, H_kv=1, mask="causal")
    report = flashref.check(q[:, 0], k[:, 0], v[:, 0], o=o[:, 0], lse=lse[:, 0], mask="causal")
    assert report.passed, str(report)
    assert report.problem["H"] == 1


def test_float16_inputs_are_judged_in_float16():
    q, k, v, _ = inputs(1, 2, 2, 64, 64, 32, seed=3, dtype=np.float16)
    o, lse = flash_forward(q, k, v, "causal")
    report = flashref.check(q, k, v, o=o, lse=lse, mask="causal")
    assert report.passed, str(report)
    assert report.to_dict()["dtype"] == "f16"


def test_strided_inputs_are_read_through_their_strides():
    q, k, v, do, o, lse = forward_case()
    # (B, S, H, d) memory seen as (B, H, S, d): a transposed view, no copy.
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert not qt.flags.c_contiguous
    assert flashref.check(qt, k, v, o=o, lse=lse).passed


def test_the_report_is_the_clis_table_and_json():
    q, k, v, do, o, lse = forward_case(mask="causal")
    bad = o.copy()
    bad[0, 1, 37, 5] += 0.5
    report = flashref.check(q, k, v, o=bad, lse=lse, mask="causal", tile=(32, 16))
    assert not report.passed
    text = str(report)
    assert text.startswith("problem: B=1 H=2 H_kv=1 S_q=100 S_k=100 d=16 mask=causal")
    assert "result: FAIL" in text
    d = report.to_dict()
    assert d["command"] == "check" and d["passed"] is False
    assert [t["tensor"] for t in d["tensors"]] == ["O", "L"]
    json.dumps(d)  # plain JSON types
    o_verdict = report.tensors["O"]
    assert not o_verdict.passed and o_verdict.error > o_verdict.limit
    assert (o_verdict.worst["h"], o_verdict.worst["s"], o_verdict.worst["i"]) == (1, 37, 5)
    assert o_verdict.worst["tile"] == 37 // 32  # the tile of tile=(32, 16) it sits in
    assert report.tensors["L"].passed
    assert report.lead and report.lead[0]["tensor"] == "O"


# (code, problem, kernel mistakes and tiles, check keywords)
FORWARD_PLANTS = [
    ("no_scale", {}, {}, {}),
    ("mask_ignored", {"mask": "causal"}, {}, {}),
    ("mask_unexpected", {"mask": "none"}, {}, {}),
    ("mask_alignment", {"mask": "causal", "S_q": 70}, {}, {}),
    ("key_padding_unmasked", {}, {"tile_k": 32}, {}),
    ("lse_base2", {}, {}, {}),
    ("lse_unshifted", {}, {}, {}),
    ("unnormalized", {}, {}, {}),
    ("softmax_epsilon", {}, {}, {}),
    ("diagonal_tiles", {"mask": "causal"}, {"tile_q": 32, "tile_k": 32}, {}),
    ("nan_masked_rows", {"mask": "causal-bottom-right", "S_q": 130}, {}, {}),
    ("masked_rows_not_zero", {"mask": "causal-bottom-right", "S_q": 130}, {}, {}),
    ("tail_rows", {}, {"tile_q": 64}, {"tile": (64, 16)}),
    ("tail_garbage", {}, {"tile_q": 64}, {"tile": (64, 16)}),
    ("tf32_matmul", {}, {}, {}),
    ("lse_low_precision", {}, {}, {}),
    # Long enough for the truncations to add up past the exact rule (KernelCorpus.TruncatedSums).
    ("rounded_toward_zero", {"S_q": 200, "S_k": 300, "d": 32}, {}, {}),
]


@pytest.mark.parametrize("code,problem,kernel,keywords", FORWARD_PLANTS, ids=[p[0] for p in FORWARD_PLANTS])
def test_a_planted_forward_mistake_is_named(code, problem, kernel, keywords):
    mask = problem.get("mask", "none")
    q, k, v, do, o, lse = forward_case(**problem, mistakes=frozenset({code}), **kernel)
    report = flashref.check(q, k, v, o=o, lse=lse, mask=mask, **keywords)
    assert not report.passed, str(report)
    assert code in report.codes, str(report)
    finding = next(f for f in report.findings if f.code == code)
    assert finding.explanation and finding.tensors
    assert set(finding.tensors) <= {"O", "L"}
    assert code in flashref.FINDING_CODES


def test_max_init_zero_is_named_where_the_scores_are_very_negative():
    q, k, v, _ = inputs(1, 2, 1, 100, 90, 16, seed=3)
    k = (k + 4).astype(F32)
    q[0, :, ::7, :] = -8  # rows whose every score is far below zero
    right = flash_forward(q, k, v)
    assert flashref.check(q, k, v, o=right[0], lse=right[1]).passed
    o, lse = flash_forward(q, k, v, mistakes=frozenset({"max_init_zero"}))
    report = flashref.check(q, k, v, o=o, lse=lse)
    assert "max_init_zero" in report.codes, str(report)


def test_tf32_and_low_precision_lse_pass_in_the_precision_they_name():
    q, k, v, do, o, lse = forward_case(mistakes=frozenset({"tf32_matmul"}))
    assert flashref.check(q, k, v, o=o, lse=lse, allow_tf32=True).passed
    q, k, v, do, o, lse = forward_case(mistakes=frozenset({"lse_low_precision"}))
    assert flashref.check(q, k, v, o=o, lse=lse, lse_dtype="float16").passed


def _three_tf32_attention(q, k, v):
    """Attention whose float32 products are 3xTF32 as CUTLASS's FastF32 makes them: each operand
    split into big (truncated to TF32) and small (the rest, rounded to TF32), big small + small
    big + big big, the small x small term dropped. One query head per key head, no mask."""
    def split(x):
        u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
        big = (u & np.uint32(0xFFFFE000)).view(F32)
        small = np.asarray(x, F32) - big
        su = small.view(np.uint32)
        small = ((su + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(F32)
        return big, small

    def product(a, b):  # a (n, c), b (c, m) -> (n, m), every term 3xTF32, summed in float32
        ab, as_ = split(a)
        bb, bs = split(b)
        out = np.zeros((a.shape[0], b.shape[1]), F32)
        for c in range(a.shape[1]):
            term = (ab[:, c:c + 1] * bs[c:c + 1] + as_[:, c:c + 1] * bb[c:c + 1]).astype(F32)
            out = (out + (term + ab[:, c:c + 1] * bb[c:c + 1]).astype(F32)).astype(F32)
        return out

    d = q.shape[-1]
    o = np.zeros_like(q)
    lse = np.zeros(q.shape[:-1], F32)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = product(q[b, h], k[b, h].T) * F32(1 / math.sqrt(d))
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m).astype(F32)
            l = p.sum(axis=1, keepdims=True, dtype=F32)
            o[b, h] = product(p, v[b, h]) / l
            lse[b, h] = (m + np.log(l))[:, 0]
    return o, lse


def test_a_3xtf32_kernel_passes_under_three_tf32():
    # d = 2 with large scores: a score is one or two products, so each product's own error is
    # the score's (docs/verification.md, "3xTF32 products").
    q, k, v, _ = inputs(1, 2, 2, 40, 40, 2, seed=11)
    q, k = q * F32(10), k * F32(10)
    o, lse = _three_tf32_attention(q, k, v)
    report = flashref.check(q, k, v, o=o, lse=lse, three_tf32=True)
    assert report.passed, str(report)
    assert report.findings == []
    assert "3xTF32 (--three-tf32)" in str(report)
    assert report.precision["products"] == "3xtf32"
    # The mode widens the floor by the products' own errors: the same tensors sit further inside.
    exact = flashref.check(q, k, v, o=o, lse=lse)
    for name, t in report.tensors.items():
        assert t.ratio < exact.tensors[name].ratio, (name, str(report), str(exact))


BACKWARD_PLANTS = [
    ("dq_scale", {}),
    ("dk_scale", {}),
    ("d_vector", {}),
    ("gqa_reduction", {"H": 4, "H_kv": 2}),
]


@pytest.mark.parametrize("code,problem", BACKWARD_PLANTS, ids=[p[0] for p in BACKWARD_PLANTS])
def test_a_planted_backward_mistake_is_named(code, problem):
    q, k, v, do, o, lse = forward_case(mask="causal", **problem)
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, "causal", mistakes=frozenset({code}))
    report = flashref.check(q, k, v, o=o, lse=lse, do=do, dq=dq, dk=dk, dv=dv, mask="causal")
    assert not report.passed, str(report)
    assert code in report.codes, str(report)
    assert report.tensors["O"].passed and report.tensors["L"].passed


def test_every_finding_code_is_planted_here():
    planted = {p[0] for p in FORWARD_PLANTS} | {p[0] for p in BACKWARD_PLANTS} | {"max_init_zero"}
    assert planted == set(flashref.FINDING_CODES)


def test_assert_attention_close_raises_with_the_table_and_findings():
    q, k, v, do, o, lse = forward_case()
    flashref.testing.assert_attention_close(q, k, v, o=o, lse=lse)
    o2, lse2 = flash_forward(q, k, v, mistakes=frozenset({"no_scale"}))
    with pytest.raises(AssertionError) as e:
        flashref.testing.assert_attention_close(q, k, v, o=o2, lse=lse2)
    assert "[no_scale]" in str(e.value) and "result: FAIL" in str(e.value)


def test_reference_gives_the_gold_and_the_baseline():
    q, k, v, do, o, lse = forward_case(mask="causal")
    ref = flashref.reference(q, k, v, do=do, mask="causal")
    gold, base = ref["gold"], ref["baseline"]
    assert gold["o"].dtype == np.float64 and gold["o"].shape == q.shape
    assert base["o"].dtype == np.float32 and gold["lse"].shape == lse.shape
    assert set(gold) == {"o", "lse", "dq", "dk", "dv"} and gold["dk"].shape == k.shape
    # The kernel and the baseline are both float32 computations of the gold.
    assert np.abs(gold["o"] - o).max() < 1e-4
    assert np.abs(gold["o"] - base["o"]).max() < 1e-4
    # The course layout in, the course layout out.
    course = flashref.reference(q[:, 0], k[:, 0], v[:, 0], mask="causal")
    assert course["gold"]["o"].shape == q[:, 0].shape and course["gold"]["lse"].shape == lse[:, 0].shape
    assert set(course["gold"]) == {"o", "lse"}
