"""The measured tile side: the choice rule, determinism given the timings (a scripted clock), the
per-process cache, the planner's use of it, and the loss run with the chosen side equal to the same
side given explicitly."""

from __future__ import annotations

import functools

import pytest
import torch

from contrastlab.losses import info_nce, stripe_calibration, tiled
from contrastlab.losses.stripe_calibration import (
    calibrated_chunk_size,
    choose_chunk_size,
    clear_calibration,
    measure_chunk_size,
)
from tests.losses._scripted_clock import ScriptedClock


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_calibration()
    yield
    clear_calibration()


def test_choose_the_smallest_side_within_the_tolerance():
    speeds = {2048: 100.0, 4096: 105.0, 8192: 112.0}  # rows per second
    assert choose_chunk_size(speeds, 0.10) == 4096  # 105 >= 0.9 · 112; 100 is not
    assert choose_chunk_size(speeds, 0.0) == 8192
    assert choose_chunk_size(speeds, 0.2) == 2048
    assert choose_chunk_size({4096: 1.0}) == 4096


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"rows_per_second": {}}, "rows_per_second"),
        ({"rows_per_second": {64: 0.0}}, "rows_per_second"),
        ({"rows_per_second": {64: float("nan")}}, "rows_per_second"),
        ({"rows_per_second": {64: 1.0}, "tolerance": 1.0}, "tolerance"),
        ({"rows_per_second": {64: 1.0}, "tolerance": -0.1}, "tolerance"),
    ],
)
def test_choose_rejects_bad_input_naming_it(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        choose_chunk_size(**kwargs)


def test_measurement_is_deterministic_given_the_timings():
    """Width 64, sides 64, 128, 256: stripes of 64, 256 and 1,024 rows. Two repeats per side, the faster
    counts: 64 rows in 1.0 s (64 rows/s), 256 in 2.0 s (128), 1,024 in 7.5 s (137): 128 is within 10%."""
    kw = {"candidates": (256, 64, 128), "tolerance": 0.10, "repeats": 2}
    durations = [1.5, 1.0, 2.0, 2.5, 7.5, 8.0]  # in the order the sides are timed: ascending
    assert measure_chunk_size(64, 8, timer=ScriptedClock(durations), **kw) == 128
    assert measure_chunk_size(64, 8, timer=ScriptedClock(durations), **kw) == 128
    # the largest side wins once it is more than 10% faster than the others
    assert measure_chunk_size(64, 8, timer=ScriptedClock([1.0, 1.0, 2.0, 2.0, 5.0, 5.0]), **kw) == 256
    # every side alike: the smallest
    assert measure_chunk_size(64, 8, timer=ScriptedClock([1.0, 1.0, 4.0, 4.0, 16.0, 16.0]), **kw) == 64


def test_sides_with_thin_stripes_are_not_timed():
    """Width 1,000: side 200 makes stripes of 40 rows (skipped), 400 of 160 rows; if every side is thin
    the largest is returned without timing anything."""

    def no_clock() -> float:
        raise AssertionError("nothing should be timed")

    assert measure_chunk_size(1000, 4, candidates=(100, 200), timer=no_clock) == 200
    assert measure_chunk_size(1000, 4, candidates=(200, 400), timer=ScriptedClock([1.0]), repeats=1) == 400


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_cols": 0}, "n_cols"),
        ({"dim": 0}, "dim"),
        ({"repeats": 0}, "repeats"),
        ({"min_rows": 0}, "min_rows"),
        ({"candidates": ()}, "candidates"),
        ({"candidates": (64, 0)}, "candidates"),
        ({"candidates": (64.0,)}, "candidates"),
        ({"tolerance": 2}, "tolerance"),
    ],
)
def test_measure_rejects_bad_arguments_naming_them(kwargs, name):
    args = {"n_cols": 64, "dim": 4, **kwargs}
    with pytest.raises(ValueError, match=f"^{name}"):
        measure_chunk_size(args.pop("n_cols"), args.pop("dim"), **args)


def test_the_choice_is_measured_once_per_key(monkeypatch):
    calls = []

    def fake(n_cols, dim, dtype, device):
        calls.append((n_cols, dim, dtype))
        return 1000 + len(calls)

    monkeypatch.setattr(stripe_calibration, "measure_chunk_size", fake)
    first = calibrated_chunk_size(40_000, 128, torch.float32, "cpu")
    assert calibrated_chunk_size(60_000, 128, torch.float32, "cpu") == first  # the same power-of-two bucket
    assert len(calls) == 1
    calibrated_chunk_size(70_000, 128, torch.float32, "cpu")  # another bucket
    calibrated_chunk_size(40_000, 64, torch.float32, "cpu")  # another D
    calibrated_chunk_size(40_000, 128, torch.float64, "cpu")  # another dtype
    assert len(calls) == 4
    clear_calibration()
    calibrated_chunk_size(40_000, 128, torch.float32, "cpu")
    assert len(calls) == 5


def test_planner_measures_only_for_thin_dense_blocks(monkeypatch):
    """Calibration happens only with ``like``, for a streamed caller, where a dense block would hold
    fewer than 256 rows; an explicit chunk_size and the kept-logits case never measure."""
    chosen = []

    def fake(n_cols, dim, dtype, device):
        chosen.append(n_cols)
        return 8192

    monkeypatch.setattr(tiled, "calibrated_chunk_size", fake)
    like = torch.empty(0, 128)
    assert tiled.plan_chunk_size(16384, 16384, 4, None, keeps_logits=False, like=like) is None  # 256 rows
    assert tiled.plan_chunk_size(4096, 4096, 4, 8, keeps_logits=False, like=like) == 8
    assert tiled.plan_chunk_size(65536, 65536, 4, None, keeps_logits=True, like=like) == tiled.DEFAULT_CHUNK_SIZE
    assert chosen == []
    # M = 65,536: a dense block holds 64 rows, a side of 8,192 makes stripes of 1,024: the stripes
    assert tiled.plan_chunk_size(65536, 65536, 4, None, keeps_logits=False, like=like) == 8192
    assert tiled.plan_chunk_size(32768, 32768, 4, None, keeps_logits=False, like=like) == 8192
    assert chosen == [65536, 32768]
    # the fixed rule without ``like``
    assert tiled.plan_chunk_size(65536, 65536, 4, None, keeps_logits=False) is None


def test_planner_keeps_the_dense_block_when_the_measured_stripes_are_not_taller(monkeypatch):
    monkeypatch.setattr(tiled, "calibrated_chunk_size", lambda *a: 2048)  # 64-row stripes at M = 65,536
    like = torch.empty(0, 128)
    assert tiled.plan_chunk_size(65536, 65536, 4, None, keeps_logits=False, like=like) is None
    # beyond M = 65,536 a dense block is thinner than 64 rows: the measured side tiles
    assert tiled.plan_chunk_size(131072, 131072, 4, None, keeps_logits=False, like=like) == 2048


def _loss_and_grads(a, p, **kw):
    a, p = a.clone().requires_grad_(), p.clone().requires_grad_()
    loss = info_nce(a, p, temperature=0.2, **kw)
    return (loss.detach(), *torch.autograd.grad(loss, [a, p]))


def test_info_nce_runs_the_measured_side_and_equals_that_side_given(monkeypatch):
    """A 48 × 48 problem scaled down: dense blocks of 8 rows (a 1,536-byte block), stripes of >= 4 rows.
    The scripted calibration (sides 24, 30, 36: stripes of 12, 18 and 27 rows) finds side 30 within 10%
    of the best; the loss then streams stripes of 18 rows, and equals ``chunk_size=30`` bit for bit
    (the same computation) and the dense path to float32 rounding."""
    monkeypatch.setattr(tiled, "_DENSE_BLOCK_BYTES", 8 * 48 * 4)
    monkeypatch.setattr(tiled, "_MIN_STREAM_ROWS", 4)
    clock = ScriptedClock([1.2, 1.2, 1.0, 1.0, 1.45, 1.45])  # 10, 18, 18.6 rows per second
    measure = functools.partial(measure_chunk_size, candidates=(24, 30, 36), min_rows=4, timer=clock)
    monkeypatch.setattr(stripe_calibration, "measure_chunk_size", measure)
    rows_seen = []
    real = tiled.dense_row_lse

    def spy(*args, **kw):
        rows_seen.append(kw.get("rows"))
        return real(*args, **kw)

    monkeypatch.setattr(tiled, "dense_row_lse", spy)
    g = torch.Generator().manual_seed(3)
    a = torch.randn(48, 16, generator=g)
    p = a + 0.5 * torch.randn(48, 16, generator=g)
    auto = _loss_and_grads(a, p)
    assert rows_seen == [18]
    fixed = _loss_and_grads(a, p, chunk_size=30)
    assert rows_seen == [18, 18]
    for x, y in zip(auto, fixed, strict=True):
        assert torch.equal(x, y)
    monkeypatch.setattr(tiled, "_DENSE_BLOCK_BYTES", 1 << 24)  # one dense block of every row
    dense = _loss_and_grads(a, p)
    assert rows_seen[-1] is None
    for x, y in zip(auto, dense, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("bad", "exc"), [(0, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_chunk_size_still_names_the_argument(bad, exc):
    with pytest.raises(exc, match="^chunk_size"):
        info_nce(torch.randn(4, 3), torch.randn(4, 3), chunk_size=bad)
