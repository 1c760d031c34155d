import numpy as np
import pytest

from contrastlab.eval.bootstrap import bootstrap_mean


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
