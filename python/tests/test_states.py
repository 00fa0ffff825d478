"""flashref.trace_states and check(states=): the mirror's states of Algorithm 1 (and, given do,
of Algorithm 2) on your own inputs, and the first step where a kernel's states leave the
algorithm. The kernels are
kernels.py's tiled numpy ones, which store their states as a debugged kernel does; the CLI
comparisons run the `flashref` command CTest names in FLASHREF_CLI."""

import json
import os
import subprocess

import numpy as np
import pytest

import flashref
from kernels import empty_states, flash_backward_states, flash_forward, inputs

CLI = os.environ.get("FLASHREF_CLI", "")
needs_cli = pytest.mark.skipif(not os.path.isfile(CLI),
                               reason="the CLI comparisons need FLASHREF_CLI (set by CTest)")

TILE = (16, 8)
MASKS = ("none", "causal", "causal-bottom-right")


def kernel_states(q, k, v, mask, mistakes=frozenset(), tile=TILE):
    """The numpy kernel's states in the layout, after running it with `mistakes`."""
    B, H, S_q, d = q.shape
    states = empty_states(B, H, S_q, k.shape[2], d, *tile)
    flash_forward(q, k, v, mask, tile_q=tile[0], tile_k=tile[1], mistakes=frozenset(mistakes),
                  states=states)
    return states


def first_step(changed, S_q, B_q):
    """The first (b, h, i, j), in the algorithm's order, where changed[b, h, i, j, r] holds for
    a row r of the tile below S_q."""
    B, H, T_q, T_k, _ = changed.shape
    for b in range(B):
        for h in range(H):
            for i in range(T_q):
                rows = min(B_q, S_q - i * B_q)
                for j in range(T_k):
                    if changed[b, h, i, j, :rows].any():
                        return b, h, i, j
    return None


def at(f):
    return f.b, f.h, f.i, f.j


def run_cli(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=False)


BACKWARD = ("D", "P", "dP", "dS", "dQ", "dV", "dK")


def kernel_backward_states(q, k, v, do, mask, mistakes=frozenset(), tile=TILE):
    """The numpy kernel's backward states in the layout, from its own forward's O and L."""
    o, lse = flash_forward(q, k, v, mask, tile_q=tile[0], tile_k=tile[1])
    return flash_backward_states(q, k, v, o, lse, do, mask, tile_q=tile[0], tile_k=tile[1],
                                 mistakes=frozenset(mistakes))


def save_inputs(tmp_path, q, k, v, do=None):
    paths = []
    for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
        if x is None:
            continue
        path = str(tmp_path / f"{name}.npy")
        np.save(path, x)
        paths += [f"--{name}", path]
    return paths


def test_trace_states_layout():
    B, H, H_kv, S_q, S_k, d = 2, 2, 1, 37, 29, 8
    q, k, v, _ = inputs(B, H, H_kv, S_q, S_k, d)
    T_q, T_k = -(-S_q // TILE[0]), -(-S_k // TILE[1])
    t = flashref.trace_states(q, k, v, tile=TILE, mask="causal")
    assert set(t) == {"baseline", "gold"}
    for kind, dtype in (("baseline", np.float32), ("gold", np.float64)):
        assert set(t[kind]) == {"m", "l", "acc"}
        assert t[kind]["m"].shape == t[kind]["l"].shape == (B, H, T_q, T_k, TILE[0])
        assert t[kind]["acc"].shape == (B, H, T_q, T_k, TILE[0], d)
        assert all(a.dtype == dtype for a in t[kind].values())
        # Rows past S_q in the last query tile hold NaN; every other row a number.
        tail = S_q - (T_q - 1) * TILE[0]
        assert np.isnan(t[kind]["l"][:, :, -1, :, tail:]).all()
        assert not np.isnan(t[kind]["l"][:, :, :-1]).any()
        assert not np.isnan(t[kind]["l"][:, :, -1, :, :tail]).any()
    # The last state of each row is the softmax's: O = acc / l and L = m + log l.
    o, lse = (flashref.reference(q, k, v, mask="causal")["gold"][n] for n in ("o", "lse"))
    g = t["gold"]
    rows = np.arange(S_q)
    i, r = rows // TILE[0], rows % TILE[0]
    last_l = g["l"][:, :, i, -1, r]
    np.testing.assert_allclose(g["acc"][:, :, i, -1, r] / last_l[..., None], o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g["m"][:, :, i, -1, r] + np.log(last_l), lse, rtol=1e-12)

    # One head, one query tile: 1 in those axes, the same numbers.
    one = flashref.trace_states(q, k, v, tile=TILE, mask="causal", select=(1, 0, 2))
    assert one["baseline"]["acc"].shape == (1, 1, 1, T_k, TILE[0], d)
    np.testing.assert_array_equal(one["baseline"]["acc"][0, 0, 0], t["baseline"]["acc"][1, 0, 2])

    # The course's (B, S, d) layout: the head axis is left out, as the layout allows.
    course = flashref.trace_states(q[:, 0], k[:, 0], v[:, 0], tile=TILE, mask="causal")
    ref = flashref.trace_states(q[:, :1], k, v, tile=TILE, mask="causal")
    for kind in ("baseline", "gold"):
        for name in ("m", "l", "acc"):
            np.testing.assert_array_equal(course[kind][name], ref[kind][name][:, 0])


@needs_cli
@pytest.mark.parametrize("dtype,mask,scale,select", [
    (np.float32, "causal-bottom-right", None, None),
    (np.float16, "causal", 0.3, (1, 1, 2)),
])
def test_trace_states_equal_the_cli_files_bitwise(tmp_path, dtype, mask, scale, select):
    q, k, v, _ = inputs(2, 2, 1, 37, 29, 8, seed=3, dtype=dtype)
    args = save_inputs(tmp_path, q, k, v) + ["--mask", mask, "--tile", "16,8",
                                             "--out", str(tmp_path / "states")]
    if scale is not None:
        args += ["--scale", repr(scale)]
    if select is not None:
        args += ["--select", ",".join(map(str, select))]
    done = run_cli("trace", *args)
    assert done.returncode == 0, done.stderr
    t = flashref.trace_states(q, k, v, tile=TILE, mask=mask, scale=scale, select=select)
    for kind, folder in (("baseline", tmp_path / "states"), ("gold", tmp_path / "states" / "gold")):
        for name in ("m", "l", "acc"):
            cli = np.load(folder / f"{name}.npy")
            mine = t[kind][name]
            assert (mine.dtype, mine.shape) == (cli.dtype, cli.shape), (kind, name)
            assert mine.tobytes() == cli.tobytes(), (kind, name)


def test_the_mirrors_own_states_pass():
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=1)
    for mask in MASKS:
        t = flashref.trace_states(q, k, v, tile=TILE, mask=mask)
        report = flashref.check(q, k, v, states=t["baseline"], tile=TILE, mask=mask)
        assert report.passed, str(report)
        assert report.first_divergence is None
        assert report.states.passed and report.states.files == ("m", "l", "acc")
        assert report.states.tile == TILE
        assert not report.states.conventions["m_log2"]
        assert not report.states.conventions["acc_normalized"]
        assert report.tensors == {}  # only states were given
        for name in ("m", "l", "acc"):
            assert report.states.quantities[name]["failed_steps"] == 0
            assert report.states.quantities[name]["steps"] > 0


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("S_q,S_k", [(37, 29), (21, 40)])
def test_a_correct_tiled_kernel_has_no_divergence(mask, S_q, S_k):
    q, k, v, _ = inputs(1, 2, 1, S_q, S_k, 8, seed=2)
    states = kernel_states(q, k, v, mask)
    report = flashref.check(q, k, v, states=states, tile=TILE, mask=mask)
    assert report.passed, str(report)


def test_a_forgotten_rescale_of_l_is_found_where_the_max_first_grows():
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=4)
    right = kernel_states(q, k, v, "none")
    broken = kernel_states(q, k, v, "none", {"l_not_rescaled"})
    # The first step where a row that has seen keys gets a larger max: the first where
    # line 12's factor exp(m_old - m) is not 1.
    m = right["m"]
    grows = np.zeros(m.shape, bool)
    grows[:, :, :, 1:] = np.isfinite(m[:, :, :, :-1]) & (m[:, :, :, 1:] > m[:, :, :, :-1])
    expected = first_step(grows, 37, TILE[0])
    assert expected is not None and expected[3] >= 1
    report = flashref.check(q, k, v, states=broken, tile=TILE)
    f = report.first_divergence
    assert not report.passed and f is not None, str(report)
    assert (at(f), f.quantity, f.line, f.cause) == (expected, "l", 12, "l_not_rescaled"), str(report)
    # The report's numbers are the kernel's and the gold's at the worst row.
    b, h, i, j = expected
    assert f.found == float(broken["l"][b, h, i, j, f.row - i * TILE[0]])
    gold = flashref.trace_states(q, k, v, tile=TILE)["gold"]["l"]
    assert f.expected == pytest.approx(gold[b, h, i, j, f.row - i * TILE[0]], rel=1e-6)
    assert [s["quantity"] for s in f.this_step] == ["m", "l", "acc"]
    assert f.this_step[0]["pass"] and not f.this_step[1]["pass"]
    assert str(report).endswith("result: FAIL\n")


def test_a_conditional_rescale_is_a_convention_not_a_divergence():
    # FlashAttention-4 keeps m until a tile raises it by more than 8 ln 2: its outputs pass, and
    # its states are judged re-based to the kept max (docs/verification.md, "Judging states").
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=4)
    for mask in MASKS:
        states = kernel_states(q, k, v, mask, {"conditional_rescale"})
        assert not np.array_equal(states["m"], kernel_states(q, k, v, mask)["m"])  # it deferred
        report = flashref.check(q, k, v, states=states, tile=TILE, mask=mask)
        assert report.passed and report.first_divergence is None, str(report)
        assert report.states.conventions["m_deferred"], str(report)
        assert not report.states.conventions["m_log2"]


def test_a_max_started_at_zero_is_found_at_the_first_row_below_zero():
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=5)
    # Positive queries and keys but one query row, of head 1's second query tile: only that
    # row's scores are all below 0, so the first step is not the first of all.
    q, k = np.abs(q), np.abs(k)
    q[0, 1, 20] = -q[0, 1, 20]
    right = kernel_states(q, k, v, "none")
    broken = kernel_states(q, k, v, "none", {"max_init_zero"})
    expected = first_step(right["m"] < 0, 37, TILE[0])
    assert expected is not None and expected[1:3] == (1, 1)
    f = flashref.check(q, k, v, states=broken, tile=TILE).first_divergence
    assert f is not None
    assert (at(f), f.quantity, f.line, f.cause) == (expected, "m", 10, "max_init_zero"), str(f)


@pytest.mark.parametrize("mask", ["causal", "causal-bottom-right"])
def test_a_strict_diagonal_mask_is_found_on_the_first_diagonal_tile(mask):
    S_q, S_k = 37, 45
    q, k, v, _ = inputs(1, 1, 1, S_q, S_k, 8, seed=6)
    right = kernel_states(q, k, v, mask)
    broken = kernel_states(q, k, v, mask, {"diagonal_strict"})
    # The first tile holding a row's own (diagonal) key.
    T_q, T_k = right["m"].shape[2:4]
    diagonal = np.zeros(right["m"].shape, bool)
    shift = 0 if mask == "causal" else S_k - S_q
    for row in range(S_q):
        diagonal[:, :, row // TILE[0], (row + shift) // TILE[1], row % TILE[0]] = True
    expected = first_step(diagonal, S_q, TILE[0])
    b, h, i, j = expected
    rows = min(TILE[0], S_q - i * TILE[0])
    # m fails first when a row's own key was its max so far; l otherwise.
    m_wrong = not np.array_equal(broken["m"][b, h, i, j, :rows], right["m"][b, h, i, j, :rows])
    f = flashref.check(q, k, v, states=broken, tile=TILE, mask=mask).first_divergence
    assert f is not None
    assert (at(f), f.quantity, f.cause) == (expected, "m" if m_wrong else "l",
                                             "diagonal_mask_strict"), str(f)


def test_outputs_and_states_make_one_verdict(tmp_path):
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=4)
    o, lse = flash_forward(q, k, v, tile_q=TILE[0], tile_k=TILE[1])
    broken = kernel_states(q, k, v, "none", {"l_not_rescaled"})
    report = flashref.check(q, k, v, o=o, lse=lse, states=broken, tile=TILE)
    assert report.tensors["O"].passed and report.tensors["L"].passed
    assert not report.passed and report.first_divergence.cause == "l_not_rescaled"
    assert report.to_dict()["first_divergence"]["cause"] == "l_not_rescaled"
    assert str(report).count("result: ") == 1
    with pytest.raises(AssertionError, match="first divergence: b = 0"):
        flashref.testing.assert_attention_close(q, k, v, o=o, states=broken, tile=TILE)
    # A subset of the states, in any float dtype, and a folder of .npy files, judge alike.
    only_l = flashref.check(q, k, v, states={"l": broken["l"].astype(np.float64), "m": None},
                            tile=TILE)
    assert only_l.states.files == ("l",)
    assert at(only_l.first_divergence) == at(report.first_divergence)
    for name, a in broken.items():
        np.save(tmp_path / f"{name}.npy", a)
    from_files = flashref.check(q, k, v, states=tmp_path, tile=TILE)
    assert from_files.states.files == ("m.npy", "l.npy", "acc.npy")
    assert from_files.first_divergence == report.first_divergence


@needs_cli
def test_check_states_reports_as_the_cli_does(tmp_path):
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=4)
    broken = kernel_states(q, k, v, "causal", {"l_not_rescaled"})
    folder = tmp_path / "states"
    folder.mkdir()
    for name, a in broken.items():
        np.save(folder / f"{name}.npy", a)
    args = save_inputs(tmp_path, q, k, v) + ["--mask", "causal", "--tile", "16,8",
                                             "--states", str(folder)]
    report = flashref.check(q, k, v, states=folder, tile=TILE, mask="causal")
    text = run_cli("check", *args)
    as_json = run_cli("check", *args, "--json")
    assert (text.returncode, as_json.returncode) == (1, 1), text.stderr
    assert str(report) == text.stdout
    assert report.to_dict() == json.loads(as_json.stdout)


def test_torch_tensors_are_taken():
    torch = pytest.importorskip("torch")
    q, k, v, _ = inputs(1, 2, 1, 37, 29, 8, seed=4)
    broken = kernel_states(q, k, v, "none", {"l_not_rescaled"})
    expected = flashref.check(q, k, v, states=broken, tile=TILE)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    t = flashref.trace_states(tq, tk, tv, tile=TILE)
    np.testing.assert_array_equal(t["baseline"]["acc"],
                                  flashref.trace_states(q, k, v, tile=TILE)["baseline"]["acc"])
    states = {name: torch.from_numpy(a).to(torch.float64) for name, a in broken.items()}
    got = flashref.check(tq, tk, tv, states=states, tile=TILE)
    assert got.first_divergence == expected.first_divergence


def test_bad_states_arguments_name_themselves(tmp_path):
    q, k, v, _ = inputs(1, 2, 1, 20, 20, 8)
    o, _ = flash_forward(q, k, v)
    good = flashref.trace_states(q, k, v, tile=TILE)["baseline"]
    bad_trace = [
        (dict(), ValueError, "tile"),
        (dict(tile=(0, 8)), ValueError, "tile"),
        (dict(tile="x"), TypeError, "tile"),
        (dict(tile=TILE, select=(3, 0)), ValueError, "select"),
        (dict(tile=TILE, select=(0, 5)), ValueError, "select"),
        (dict(tile=TILE, select=(0, 0, 2)), ValueError, "select"),
        (dict(tile=TILE, select=(0,)), TypeError, "select"),
        (dict(tile=TILE, select=(0, -1)), ValueError, "select"),
        (dict(tile=TILE, mask="upper"), ValueError, "mask"),
    ]
    for kwargs, error, name in bad_trace:
        with pytest.raises(error) as e:
            flashref.trace_states(q, k, v, **kwargs)
        assert str(e.value).startswith(name + ":"), (name, str(e.value))

    # States past the CLI's limit (2^26 accumulator values) are refused before any work,
    # naming select, which keeps one head: here 2 heads of 256 key tiles x 4096 rows x 64.
    big_q = np.zeros((1, 2, 4096, 64), np.float32)
    big_kv = np.zeros((1, 1, 4096, 64), np.float32)
    with pytest.raises(ValueError, match=r"^select: .*select=\(b, h\)"):
        flashref.trace_states(big_q, big_kv, big_kv, tile=16)
    with pytest.raises(ValueError, match="^select:"):
        flashref.check(big_q, big_kv, big_kv, states={"m": np.zeros(1, np.float32)}, tile=16)

    bad_file = tmp_path / "bad"
    bad_file.mkdir()
    np.save(bad_file / "m.npy", good["m"][:, :, :1])
    (tmp_path / "empty").mkdir()
    bad_check = [
        (dict(states=good), ValueError, "tile"),
        (dict(states=good, tile=TILE, allow_tf32=True), ValueError, "allow_tf32"),
        (dict(o=o, select=(0, 0)), ValueError, "select"),
        (dict(states=good, tile=TILE, select=(0, 9)), ValueError, "select"),
        (dict(states={"x": good["m"]}, tile=TILE), ValueError, "states"),
        (dict(states={"baseline": good}, tile=TILE), ValueError, "states"),
        (dict(states={}, tile=TILE), ValueError, "states"),
        (dict(states=42, tile=TILE), TypeError, "states"),
        (dict(states=str(tmp_path / "missing"), tile=TILE), ValueError, "states"),
        (dict(states=tmp_path / "empty", tile=TILE), ValueError, "states"),
        (dict(states={"m": good["m"][:, :, :, :1]}, tile=TILE), ValueError, "states['m']"),
        (dict(states={"acc": good["m"]}, tile=TILE), ValueError, "states['acc']"),
        (dict(states={"l": np.zeros(good["l"].shape, np.int32)}, tile=TILE), TypeError, "states['l']"),
        (dict(states={"l": good["l"].tolist()}, tile=TILE), TypeError, "states['l']"),
        (dict(states={"m": good["m"]}, tile=(8, 8)), ValueError, "states['m']"),
        (dict(states=bad_file, tile=TILE), ValueError, str(bad_file / "m.npy")),
    ]
    for kwargs, error, name in bad_check:
        with pytest.raises(error) as e:
            flashref.check(q, k, v, **kwargs)
        assert str(e.value).startswith(name + ":"), (name, str(e.value))


# ------------------------------------------------------------------------------------------
# The backward's states (Algorithm 2), given do.

@needs_cli
@pytest.mark.parametrize("dtype,mask,select", [
    (np.float32, "causal-bottom-right", None),
    (np.float16, "causal", (1, 1, 2)),
])
def test_backward_trace_states_equal_the_cli_files_bitwise(tmp_path, dtype, mask, select):
    q, k, v, do = inputs(2, 2, 1, 37, 29, 8, seed=3, dtype=dtype)
    args = save_inputs(tmp_path, q, k, v, do) + ["--mask", mask, "--tile", "16,8",
                                                 "--out", str(tmp_path / "states")]
    if select is not None:
        args += ["--select", ",".join(map(str, select))]
    done = run_cli("trace", *args)
    assert done.returncode == 0, done.stderr
    t = flashref.trace_states(q, k, v, do, tile=TILE, mask=mask, select=select)
    for kind, folder in (("baseline", tmp_path / "states"), ("gold", tmp_path / "states" / "gold")):
        assert set(t[kind]) == {"m", "l", "acc", *BACKWARD}
        for name in BACKWARD:
            cli = np.load(folder / f"{name}.npy")
            mine = t[kind][name]
            assert (mine.dtype, mine.shape) == (cli.dtype, cli.shape), (kind, name)
            assert mine.tobytes() == cli.tobytes(), (kind, name)


def test_backward_trace_states_layout():
    B, H, S_q, S_k, d = 1, 2, 37, 29, 8
    q, k, v, do = inputs(B, H, 1, S_q, S_k, d, seed=1)
    T_q, T_k = -(-S_q // TILE[0]), -(-S_k // TILE[1])
    t = flashref.trace_states(q, k, v, do, tile=TILE)
    g = t["gold"]
    assert g["D"].shape == (B, H, T_q, TILE[0])
    assert g["P"].shape == g["dP"].shape == g["dS"].shape == (B, H, T_q, T_k, *TILE)
    assert g["dQ"].shape == (B, H, T_q, T_k, TILE[0], d)
    assert g["dV"].shape == g["dK"].shape == (B, H, T_k, T_q, TILE[1], d)
    # The last accumulators are the gradients (the scale applied after the loops, as the
    # layout keeps it): dQ_i after the last key tile, dV_j and dK_j after the last query tile.
    gold = flashref.reference(q, k, v, do=do)["gold"]
    scale = 1 / np.sqrt(d)
    rows, keys = np.arange(S_q), np.arange(S_k)
    np.testing.assert_allclose(g["dQ"][:, :, rows // TILE[0], -1, rows % TILE[0]] * scale,
                               gold["dq"], rtol=1e-10, atol=1e-12)
    dv = g["dV"][:, :, keys // TILE[1], -1, keys % TILE[1]].sum(axis=1, keepdims=True)
    dk = g["dK"][:, :, keys // TILE[1], -1, keys % TILE[1]].sum(axis=1, keepdims=True) * scale
    np.testing.assert_allclose(dv, gold["dv"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dk, gold["dk"], rtol=1e-10, atol=1e-12)
    # Without do, the forward's states only.
    assert set(flashref.trace_states(q, k, v, tile=TILE)["gold"]) == {"m", "l", "acc"}


def test_the_mirrors_own_backward_states_pass():
    q, k, v, do = inputs(1, 2, 1, 37, 29, 8, seed=1)
    for mask in MASKS:
        t = flashref.trace_states(q, k, v, do, tile=TILE, mask=mask)
        report = flashref.check(q, k, v, do=do, states=t["baseline"], tile=TILE, mask=mask)
        assert report.passed, str(report)
        assert report.first_divergence is None
        assert report.states.files == ("m", "l", "acc")
        assert report.backward_states.passed and report.backward_states.files == BACKWARD
        assert not any(report.backward_states.conventions[c]
                       for c in ("dS_scaled", "dQ_scaled", "dK_scaled"))
        for name in ("D", "P", "dP", "dS", "dQ_i", "dV_j", "dK_j"):
            q_summary = report.backward_states.quantities[name]
            assert q_summary["failed_steps"] == 0 and q_summary["steps"] > 0, name


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("S_q,S_k", [(37, 29), (21, 40)])
def test_a_correct_tiled_backward_has_no_divergence(mask, S_q, S_k):
    q, k, v, do = inputs(1, 2, 1, S_q, S_k, 8, seed=2)
    states = kernel_backward_states(q, k, v, do, mask)
    report = flashref.check(q, k, v, do=do, states=states, tile=TILE, mask=mask)
    assert report.passed and report.states is None, str(report)


def differs(a, b):
    """Where two states differ (NaN equal to NaN), reduced to (B, H, T_q, T_k, B_q)."""
    return (~((a == b) | (np.isnan(a) & np.isnan(b)))).any(axis=-1)


def test_ds_without_D_is_found_at_the_first_tile_pair_it_changes():
    # Bottom-right causal with S_q > S_k: the first query tile sees no key, so the first
    # step where dS = P * dP differs from P * (dP - D) is not the first of all.
    S_q, S_k, mask = 45, 29, "causal-bottom-right"
    q, k, v, do = inputs(1, 2, 1, S_q, S_k, 8, seed=7)
    right = kernel_backward_states(q, k, v, do, mask)
    broken = kernel_backward_states(q, k, v, do, mask, {"ds_without_D"})
    expected = first_step(differs(right["dS"], broken["dS"]), S_q, TILE[0])
    assert expected is not None and expected[2] >= 1
    report = flashref.check(q, k, v, do=do, states=broken, tile=TILE, mask=mask)
    f = report.first_divergence
    assert not report.passed and f is not None, str(report)
    assert (at(f), f.quantity, f.algorithm, f.line, f.cause) == (
        expected, "dS", 2, 15, "ds_without_D"), str(report)
    assert f == report.backward_states.first_divergence
    # The numbers are the kernel's and the gold's at the worst element.
    b, h, i, j = expected
    r, c = f.row - i * TILE[0], f.col - j * TILE[1]
    assert f.found == float(broken["dS"][b, h, i, j, r, c])
    gold = flashref.trace_states(q, k, v, do, tile=TILE, mask=mask)["gold"]["dS"]
    assert f.expected == pytest.approx(gold[b, h, i, j, r, c], rel=1e-6)
    passed = {s["quantity"]: s["pass"] for s in f.this_step}
    assert passed["P"] and passed["dP"] and not passed["dS"]
    assert "Alg. 2 line 15" in str(f) and str(report).endswith("result: FAIL\n")


def test_the_forward_divergence_comes_first():
    q, k, v, do = inputs(1, 2, 1, 37, 29, 8, seed=4)
    forward = kernel_states(q, k, v, "none", {"l_not_rescaled"})
    backward = kernel_backward_states(q, k, v, do, "none", {"ds_without_D"})
    both = flashref.check(q, k, v, do=do, states={**forward, **backward}, tile=TILE)
    assert both.first_divergence == both.states.first_divergence
    assert both.first_divergence.cause == "l_not_rescaled"
    assert both.backward_states.first_divergence.cause == "ds_without_D"
    assert both.to_dict()["first_divergence"]["quantity"] == "l"
    # With the forward right, the backward's is the first.
    right = kernel_states(q, k, v, "none")
    one = flashref.check(q, k, v, do=do, states={**right, **backward}, tile=TILE)
    assert one.states.passed and one.first_divergence.cause == "ds_without_D"
    assert one.to_dict()["first_divergence"]["quantity"] == "dS"
    # A subset: dS alone, and D as the kernel's own (B, H, S_q) buffer.
    D = (do * flash_forward(q, k, v, tile_q=TILE[0], tile_k=TILE[1])[0]).sum(axis=-1)
    only = flashref.check(q, k, v, do=do, states={"dS": backward["dS"], "D": D}, tile=TILE)
    assert only.backward_states.files == ("D", "dS") and only.states is None
    assert at(only.first_divergence) == at(one.first_divergence)
    assert only.first_divergence.quantity == "dS"


@needs_cli
def test_check_backward_states_reports_as_the_cli_does(tmp_path):
    q, k, v, do = inputs(1, 2, 1, 37, 29, 8, seed=4)
    states = {**kernel_states(q, k, v, "causal"),
              **kernel_backward_states(q, k, v, do, "causal", {"ds_without_D"})}
    folder = tmp_path / "states"
    folder.mkdir()
    for name, a in states.items():
        np.save(folder / f"{name}.npy", a)
    args = save_inputs(tmp_path, q, k, v, do) + ["--mask", "causal", "--tile", "16,8",
                                                 "--states", str(folder)]
    text = run_cli("check", *args)
    as_json = run_cli("check", *args, "--json")
    assert (text.returncode, as_json.returncode) == (1, 1), text.stderr
    for given in (folder, states):
        report = flashref.check(q, k, v, do=do, states=given, tile=TILE, mask="causal")
        expected = json.loads(as_json.stdout)
        if given is states:  # the dict's files are its keys, the folder's its file names
            for part in ("states", "backward_states"):
                expected[part]["files"] = [n[:-len(".npy")] for n in expected[part]["files"]]
        else:
            assert str(report) == text.stdout
        assert report.to_dict() == expected
        assert report.first_divergence.cause == "ds_without_D"


def test_bad_backward_states_name_themselves(tmp_path):
    q, k, v, do = inputs(1, 2, 1, 20, 20, 8)
    good = flashref.trace_states(q, k, v, do, tile=TILE)["baseline"]
    np.save(tmp_path / "D.npy", good["D"])
    bad_shape = tmp_path / "bad"
    bad_shape.mkdir()
    np.save(bad_shape / "dK.npy", good["dQ"])
    bad = [
        (dict(states={"dS": good["dS"]}), ValueError, "do"),
        (dict(states=tmp_path), ValueError, "do"),
        (dict(do=do, states={"dS": good["dK"]}), ValueError, "states['dS']"),
        (dict(do=do, states={"D": good["D"][:, :, :1]}), ValueError, "states['D']"),
        (dict(do=do, states={"dV": good["dS"]}), ValueError, "states['dV']"),
        (dict(do=do, states={"dQ": np.zeros(good["dQ"].shape, np.int32)}), TypeError,
         "states['dQ']"),
        (dict(do=do, states={"dk": good["dK"]}), ValueError, "states"),
        (dict(do=do, states={"D": None, "dS": None}), ValueError, "states"),
        (dict(do=do, states=bad_shape), ValueError, str(bad_shape / "dK.npy")),
    ]
    for kwargs, error, name in bad:
        with pytest.raises(error) as e:
            flashref.check(q, k, v, tile=TILE, **kwargs)
        assert str(e.value).startswith(name + ":"), (name, str(e.value))
    # The backward's states past the size limit are refused before any work, naming select.
    big_q = np.zeros((1, 2, 2048, 64), np.float32)
    big_kv = np.zeros((1, 1, 2048, 64), np.float32)
    with pytest.raises(ValueError, match=r"^select: the backward states .*select=\(b, h\)"):
        flashref.trace_states(big_q, big_kv, big_kv, big_q, tile=16)
