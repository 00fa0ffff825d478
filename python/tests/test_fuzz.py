"""flashref.fuzz and check_function on numpy kernels: the C++ generator and RapidCheck's
shrinking judging a Python function."""

import numpy as np
import pytest

import flashref
from kernels import flash_forward

TILE = 16


def correct(q, k, v, is_causal):
    return flash_forward(q, k, v, "causal" if is_causal else "none", tile_q=TILE, tile_k=TILE)


def padded_keys(q, k, v, is_causal):
    return flash_forward(q, k, v, "causal" if is_causal else "none", tile_q=TILE, tile_k=TILE,
                         mistakes=frozenset({"key_padding_unmasked"}))


def every_mask(q, k, v, mask, scale):
    return flash_forward(q, k, v, mask, scale, tile_q=TILE, tile_k=TILE)


def test_a_correct_kernel_passes_fuzz():
    result = flashref.fuzz(correct, array="numpy", max_cases=40, seed=1, tile=TILE, progress=False)
    assert result.passed, str(result)
    assert result.cases == 40
    assert result.counterexample is None and result.report is None and result.repro is None


def test_a_kernel_taking_mask_and_scale_is_fuzzed_over_every_mask_and_scale():
    result = flashref.fuzz(every_mask, array="numpy", max_cases=30, seed=2, progress=False)
    assert result.passed, str(result)


def test_a_padded_key_bug_fails_and_shrinks_to_one_key_past_a_tile():
    result = flashref.fuzz(padded_keys, array="numpy", max_cases=200, seed=3, tile=TILE,
                           progress=False)
    assert not result.passed
    c = result.counterexample
    assert c is not None, str(result)
    # The smallest failing problem: the keys fill one tile and spill one key into the next.
    assert c["S_k"] == TILE + 1, str(result)
    assert result.report is not None and "key_padding_unmasked" in result.report.codes, str(result.report)
    # The repro runs and fails the same way.
    scope = {"padded_keys": padded_keys}
    exec(result.repro.replace("print(report)", ""), scope)
    assert not scope["report"].passed
    assert "key_padding_unmasked" in scope["report"].codes


def test_check_function_judges_one_problem():
    report = flashref.check_function(correct, B=2, H=2, S_q=33, S_k=47, d=24, mask="causal",
                                     array="numpy", tile=TILE)
    assert report.passed, str(report)
    assert report.problem["S_k"] == 47
    bad = flashref.check_function(padded_keys, {"B": 1, "H": 1, "S_q": 20, "S_k": 17, "d": 8},
                                  array="numpy")
    assert not bad.passed and "key_padding_unmasked" in bad.codes


def test_the_course_layout_folds_heads_into_the_batch():
    seen = []

    def course(q, k, v, is_causal):
        seen.append(q.shape)
        o, lse = correct(q[:, None], k[:, None], v[:, None], is_causal)
        return o[:, 0], lse[:, 0]

    report = flashref.check_function(course, B=2, H=3, S_q=20, d=8, layout="bsd", array="numpy")
    assert report.passed, str(report)
    assert seen == [(6, 20, 8)]


def test_a_kernel_that_raises_fails_with_its_message():
    def crashes_on_odd_d(q, k, v, is_causal):
        if q.shape[-1] % 2:
            raise RuntimeError("odd head dim")
        return correct(q, k, v, is_causal)

    result = flashref.fuzz(crashes_on_odd_d, array="numpy", max_cases=100, seed=4, progress=False)
    assert not result.passed
    assert "odd head dim" in result.failure
    assert result.counterexample["d"] % 2 == 1 and result.report is None


def test_not_implemented_discards_the_case():
    def only_even_d(q, k, v, is_causal):
        if q.shape[-1] % 2:
            raise NotImplementedError("odd d")
        return correct(q, k, v, is_causal)

    result = flashref.fuzz(only_even_d, array="numpy", max_cases=20, seed=5, progress=False)
    assert result.passed, str(result)
    assert result.unsupported > 0


def test_wrong_output_shapes_fail_the_case():
    result = flashref.fuzz(lambda q, k, v: q[..., :1], array="numpy", max_cases=5, seed=6,
                           progress=False)
    assert not result.passed and "fn's O has shape" in result.failure


def test_assert_fuzz_raises_for_a_failing_kernel():
    flashref.testing.assert_fuzz(correct, array="numpy", max_cases=5, seed=7, progress=False)
    with pytest.raises(AssertionError) as e:
        flashref.testing.assert_fuzz(padded_keys, array="numpy", max_cases=200, seed=3,
                                     tile=TILE, progress=False)
    assert "key_padding_unmasked" in str(e.value) and "check_function" in str(e.value)


def test_float16_cases_hand_float16_arrays():
    dtypes = set()

    def record(q, k, v, is_causal):
        dtypes.add(q.dtype)
        return correct(q, k, v, is_causal)

    result = flashref.fuzz(record, array="numpy", max_cases=30, seed=8, dtypes=["float16"],
                           progress=False)
    assert result.passed, str(result)
    assert dtypes == {np.dtype(np.float16)}


def test_three_tf32_reaches_the_judge_and_the_repro():
    # Fuzzed as a 3xTF32 kernel: the judge takes the precision (the report says so), and a
    # failing case's repro repeats it, so check_function judges the case as fuzz did.
    result = flashref.fuzz(padded_keys, array="numpy", max_cases=200, seed=3, tile=TILE,
                           three_tf32=True, progress=False)
    assert not result.passed
    assert result.report.precision["three_tf32"] is True, str(result.report)
    assert "three_tf32=True" in result.repro
    scope = {"padded_keys": padded_keys}
    exec(result.repro.replace("print(report)", ""), scope)
    assert scope["report"].precision["three_tf32"] is True
    assert "key_padding_unmasked" in scope["report"].codes
    with pytest.raises(ValueError, match="three_tf32"):
        flashref.fuzz(correct, array="numpy", max_cases=1, three_tf32=True, allow_tf32=True)
