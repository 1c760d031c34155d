"""Paired statistics: the randomisation test against exact enumeration, bootstrap coverage, Holm."""

import itertools

import numpy as np
import pytest

from contrastlab.eval.paired import bootstrap_difference, holm, randomization_test, stratified_bootstrap


def _enumerated_p(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided sign-flip p-value by brute force over every sign pattern, written from its definition."""
    d = [float(y - x) for x, y in zip(a, b, strict=True)]
    observed = abs(sum(d))
    count = total = 0
    for signs in itertools.product((1.0, -1.0), repeat=len(d)):
        total += 1
        if abs(sum(s * v for s, v in zip(signs, d, strict=True))) >= observed - 1e-9:
            count += 1
    return count / total


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("q", [1, 2, 5, 9])
def test_randomization_equals_exact_enumeration(seed: int, q: int) -> None:
    rng = np.random.default_rng(seed)
    # metric-like values on a grid (0, 1/4, …, 1): many equal |differences|, where "as large" matters
    a = rng.integers(0, 5, size=q) / 4
    b = rng.integers(0, 5, size=q) / 4
    if not np.any(b - a):
        b[0] = 1.0 - a[0] if a[0] != 0.5 else 0.0
    assert randomization_test(a, b) == _enumerated_p(a, b)


def test_randomization_monte_carlo_is_close_to_exact() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(14), rng.random(14) + 0.15
    exact = randomization_test(a, b)  # 14 <= 16: enumerated
    mc = randomization_test(a, b, exact_limit=0, n_perm=200_000, rng=np.random.default_rng(1))
    # a binomial proportion over 200,000 draws: 6 standard errors
    assert abs(mc - exact) <= 6 * np.sqrt(exact * (1 - exact) / 200_000) + 1 / 200_001


def test_identical_systems_give_p_one_and_zero_width() -> None:
    a = np.random.default_rng(0).random(300)
    assert randomization_test(a, a.copy()) == 1.0
    assert bootstrap_difference(a, a.copy()) == (0.0, 0.0, 0.0)
    assert stratified_bootstrap([(a, a.copy()), (a[:50], a[:50].copy())]) == (0.0, 0.0, 0.0)


def test_bootstrap_interval_covers_a_known_difference_95_percent_of_the_time() -> None:
    # 1,000 simulated pairs of models on 200 queries: per-query scores in [0, 1] (a graded metric's range) with
    # a true mean difference of 0.03; the percentile interval must cover it in 93-97% of the simulations
    rng = np.random.default_rng(2024)
    q, delta, sims = 200, 0.03, 1000
    covered = 0
    for _ in range(sims):
        a = rng.beta(2.0, 3.0, size=q)
        noise = rng.beta(2.0, 2.0, size=q) - 0.5  # symmetric, mean 0
        b = a + delta + 0.4 * noise
        mean, low, high = bootstrap_difference(a, b, n_boot=1000, rng=rng)
        covered += low <= delta <= high
    assert 930 <= covered <= 970, covered


def test_stratified_bootstrap_is_the_mean_of_task_means() -> None:
    rng = np.random.default_rng(5)
    pairs = [(rng.random(40), rng.random(40)), (rng.random(90), rng.random(90) + 0.2)]
    mean, low, high = stratified_bootstrap(pairs, n_boot=2000, rng=rng)
    assert mean == pytest.approx(np.mean([(b - a).mean() for a, b in pairs]), abs=1e-15)
    assert low < mean < high


def test_holm_by_hand() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.5])
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1 → 0.04, 0.09, 0.08 → monotone 0.09, then 0.5
    assert holm(p).tolist() == pytest.approx([0.04, 0.09, 0.09, 0.5], abs=1e-15)
    assert holm([0.9, 0.8]).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="pvalues"):
        holm([1.5])


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="a and b"):
        randomization_test(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="a and b"):
        bootstrap_difference(np.array([np.nan]), np.zeros(1))
    with pytest.raises(ValueError, match="n_perm"):
        randomization_test(np.zeros(20), np.ones(20), n_perm=0)
