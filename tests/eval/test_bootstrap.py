import numpy as np
import pytest

from contrastlab.eval.bootstrap import bootstrap_mean, stratified_bootstrap_mean


def test_bootstrap_of_constant_values_is_that_constant() -> None:
    rng = np.random.default_rng(0)
    mean, low, high = bootstrap_mean(np.full(7, 0.25), 100, rng)
    assert (mean, low, high) == (0.25, 0.25, 0.25)  # every resample mean of equal values is that value


def test_bootstrap_of_columns_resamples_rows_together() -> None:
    # Two columns that differ by exactly 1 in every row: the row means are column 0 plus 0.5, so the
    # paired statistic's interval is column 0's interval shifted by 0.5 (same draws from the same seed).
    col = np.arange(10, dtype=np.float64)
    both = np.stack([col, col + 1.0], axis=1)
    one = bootstrap_mean(col, 200, np.random.default_rng(3))
    two = bootstrap_mean(both, 200, np.random.default_rng(3))
    assert two == pytest.approx(tuple(v + 0.5 for v in one), abs=1e-12)
    assert one[1] <= one[0] <= one[2]


def test_the_interval_is_the_quantiles_of_a_loop_over_resamples() -> None:
    values = np.random.default_rng(5).normal(size=30)
    mean, low, high = bootstrap_mean(values, 300, np.random.default_rng(9))
    rng = np.random.default_rng(9)
    idx = rng.integers(0, 30, size=(300, 30))
    means = [float(np.mean([values[j] for j in row])) for row in idx]
    assert mean == pytest.approx(float(np.mean(values)), abs=1e-15)
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), abs=1e-12)


@pytest.mark.parametrize(
    "values, n_boot, match",
    [
        (np.zeros(0), 10, "values must be a non-empty"),
        (np.zeros((2, 2, 2)), 10, "values must be a non-empty"),
        (np.array([0.0, np.nan]), 10, "values must be finite"),
        (np.zeros(3), 0, "n_boot must be an int >= 1"),
    ],
)
def test_bad_input_is_named(values: np.ndarray, n_boot: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bootstrap_mean(values, n_boot, np.random.default_rng(0))


def test_the_stratified_interval_is_the_quantiles_of_a_loop_over_resamples_and_tasks() -> None:
    gen = np.random.default_rng(5)
    tasks = [gen.normal(size=30), gen.random(7), gen.normal(2.0, 1.0, size=12)]
    mean, low, high = stratified_bootstrap_mean(tasks, 300, np.random.default_rng(9))
    # the draws: each task in turn, all its resamples at once (each task's block is under 4M indices)
    rng = np.random.default_rng(9)
    idx = [rng.integers(0, v.size, size=(300, v.size)) for v in tasks]
    means = [
        float(np.mean([np.mean([v[j] for j in rows[b]]) for v, rows in zip(tasks, idx, strict=True)]))
        for b in range(300)
    ]
    assert mean == pytest.approx(float(np.mean([np.mean(v) for v in tasks])), abs=1e-15)
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), abs=1e-12)


def test_one_task_is_the_plain_bootstrap_and_every_task_weighs_the_same() -> None:
    values = np.random.default_rng(3).random(25)
    one = stratified_bootstrap_mean([values], 200, np.random.default_rng(4))
    assert one == pytest.approx(bootstrap_mean(values, 200, np.random.default_rng(4)), abs=1e-15)
    # a task of 2 queries weighs as much as one of 50: the centre is the mean of the two task means
    mean, _, _ = stratified_bootstrap_mean([np.full(2, 1.0), np.zeros(50)], 10, np.random.default_rng(0))
    assert mean == 0.5


@pytest.mark.parametrize(
    "values, n_boot, match",
    [
        ([], 10, "values must hold at least one task"),
        ([np.zeros(3), np.zeros(0)], 10, r"values\[1\] must be a non-empty"),
        ([np.zeros((2, 2))], 10, r"values\[0\] must be a non-empty"),
        ([np.array([0.0, np.inf])], 10, r"values\[0\] must be finite"),
        ([np.zeros(3)], 0, "n_boot must be an int >= 1"),
    ],
)
def test_stratified_bad_input_is_named(values: list[np.ndarray], n_boot: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stratified_bootstrap_mean(values, n_boot, np.random.default_rng(0))
