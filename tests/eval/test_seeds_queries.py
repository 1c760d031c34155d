"""Seeds × queries comparisons: the random-effect test's level by simulation, its terms against their
definitions, the two-level bootstrap against a resampling loop, and the refusals."""

import numpy as np
import pytest

from contrastlab.eval.seeds_queries import seed_query_bootstrap, seed_random_effect_test


def _null_pair(rng: np.random.Generator, s: int, q: int, seed_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """Two arms of one recipe: the same mean, a random effect per seed, query difficulty shared by both arms,
    an arm × query interaction and a residual (the model of the module docstring under the null)."""
    difficulty = rng.normal(0.0, 0.2, size=q)

    def arm() -> np.ndarray:
        seed = rng.normal(0.0, seed_sd, size=(s, 1))
        interaction = rng.normal(0.0, 0.05, size=q)
        return 0.5 + seed + difficulty + interaction + rng.normal(0.0, 0.05, size=(s, q))

    return arm(), arm()


@pytest.mark.parametrize(("seeds", "queries", "seed_sd"), [(3, 100, 0.01), (5, 60, 0.02)])
def test_false_positives_of_a_null_with_a_seed_effect_are_four_to_six_percent(
    seeds: int, queries: int, seed_sd: float
) -> None:
    # 4,000 simulated nulls from a fixed generator: the rejection rate at 5% must lie in [4%, 6%]
    # (the binomial standard error at 5% is 0.34%, so the band is about three of them either side)
    rng = np.random.default_rng(20261207)
    sims = 4000
    rejected = sum(seed_random_effect_test(*_null_pair(rng, seeds, queries, seed_sd)).p < 0.05 for _ in range(sims))
    assert 0.04 <= rejected / sims <= 0.06


def test_a_queries_only_test_would_reject_far_too_often_under_the_same_null() -> None:
    # the reason for the seed level: the paired t test over queries of the seed-averaged scores ignores the
    # seed effect and rejects a true null much more often than 5%
    from scipy import stats

    rng = np.random.default_rng(7)
    sims = 1000
    naive = 0
    for _ in range(sims):
        a, b = _null_pair(rng, 3, 100, 0.02)
        naive += stats.ttest_rel(b.mean(axis=0), a.mean(axis=0)).pvalue < 0.05
    assert naive / sims > 0.2


def test_variance_terms_equal_their_definitions() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((3, 7)), rng.random((4, 7))
    r = seed_random_effect_test(a, b)

    def seed_term(x: np.ndarray) -> float:
        s, q = x.shape
        rows = [sum(x[i, j] for j in range(q)) / q for i in range(s)]
        mean = sum(rows) / s
        return sum((m - mean) ** 2 for m in rows) / (s - 1) / s

    def residual_term(x: np.ndarray) -> float:
        s, q = x.shape
        rows = [sum(x[i]) / q for i in range(s)]
        cols = [sum(x[:, j]) / s for j in range(q)]
        grand = sum(rows) / s
        ss = sum((x[i, j] - rows[i] - cols[j] + grand) ** 2 for i in range(s) for j in range(q))
        return ss / ((s - 1) * (q - 1)) / (s * q)

    q = a.shape[1]
    d = [sum(b[:, j]) / b.shape[0] - sum(a[:, j]) / a.shape[0] for j in range(q)]
    dm = sum(d) / q
    query = sum((x - dm) ** 2 for x in d) / (q - 1) / q
    variance = seed_term(a) + seed_term(b) + query - residual_term(a) - residual_term(b)
    assert variance > seed_term(a) + seed_term(b)  # this draw takes the unclamped path
    assert r.standard_error == pytest.approx(variance**0.5, rel=1e-12)
    assert r.difference == pytest.approx(b.mean() - a.mean(), rel=1e-12)
    assert r.seed_share == pytest.approx((seed_term(a) + seed_term(b)) / variance, rel=1e-12)
    assert 0.0 < r.p < 1.0


def test_identical_arms_give_zero_difference_and_p_one() -> None:
    a = np.random.default_rng(0).random((3, 40))
    r = seed_random_effect_test(a, a.copy())
    assert r.difference == 0.0 and r.p == 1.0
    assert seed_query_bootstrap(a, a.copy(), n_boot=200)[0] == 0.0


def test_bootstrap_equals_a_loop_over_the_same_draws() -> None:
    a, b = np.random.default_rng(3).random((3, 9)), np.random.default_rng(4).random((2, 9))
    n_boot = 50
    mean, low, high = seed_query_bootstrap(a, b, n_boot=n_boot, rng=np.random.default_rng(11))
    gen = np.random.default_rng(11)  # one chunk: the draws come in the order the function makes them
    rows_a = gen.integers(0, 3, size=(n_boot, 3, 1))
    rows_b = gen.integers(0, 2, size=(n_boot, 2, 1))
    cols = gen.integers(0, 9, size=(n_boot, 1, 9))
    stats = []
    for m in range(n_boot):
        qs = cols[m, 0]
        mb = sum(b[r, c] for r in rows_b[m, :, 0] for c in qs) / (2 * 9)
        ma = sum(a[r, c] for r in rows_a[m, :, 0] for c in qs) / (3 * 9)
        stats.append(mb - ma)
    assert mean == pytest.approx(b.mean() - a.mean(), rel=1e-12)
    assert (low, high) == pytest.approx(tuple(np.quantile(stats, [0.025, 0.975])), rel=1e-12)


def test_bootstrap_interval_widens_with_the_seed_effect() -> None:
    # the same queries and residuals; a seed effect ten times larger must widen the interval
    rng = np.random.default_rng(5)
    base = rng.normal(0.0, 0.05, size=(2, 3, 80))
    seed = rng.normal(0.0, 1.0, size=(2, 3, 1))
    narrow = seed_query_bootstrap(*(base + 0.005 * seed), n_boot=2000)
    wide = seed_query_bootstrap(*(base + 0.05 * seed), n_boot=2000)
    assert wide[2] - wide[1] > narrow[2] - narrow[1]


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (np.zeros((1, 5)), np.zeros((3, 5)), "a must be an"),
        (np.zeros((3, 5)), np.zeros((3, 1)), "b must be an"),
        (np.zeros((3, 5)), np.zeros((3, 6)), "same queries"),
        (np.full((3, 5), np.nan), np.zeros((3, 5)), "a must be finite"),
        (np.zeros(5), np.zeros((3, 5)), "a must be an"),
    ],
)
def test_bad_input_names_the_argument(a: np.ndarray, b: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        seed_random_effect_test(a, b)
    with pytest.raises(ValueError, match=match):
        seed_query_bootstrap(a, b)


def test_bootstrap_refuses_a_bad_resample_count() -> None:
    with pytest.raises(ValueError, match="n_boot"):
        seed_query_bootstrap(np.zeros((2, 3)), np.zeros((2, 3)), n_boot=0)


def test_stratified_bootstrap_of_one_task_is_the_two_level_bootstrap() -> None:
    # with one task the draws are made in the same order, so the two functions agree exactly
    from contrastlab.eval.seeds_queries import stratified_seed_query_bootstrap

    a, b = np.random.default_rng(8).random((3, 30)), np.random.default_rng(9).random((3, 30))
    one = seed_query_bootstrap(a, b, n_boot=300, rng=np.random.default_rng(2))
    many = stratified_seed_query_bootstrap([(a, b)], n_boot=300, rng=np.random.default_rng(2))
    assert one == many


def test_stratified_bootstrap_centre_is_the_mean_of_the_task_differences_and_refuses_uneven_runs() -> None:
    from contrastlab.eval.seeds_queries import stratified_seed_query_bootstrap

    rng = np.random.default_rng(10)
    t1 = (rng.random((2, 20)), rng.random((3, 20)) + 0.1)
    t2 = (rng.random((2, 50)), rng.random((3, 50)))
    centre, low, high = stratified_seed_query_bootstrap([t1, t2], n_boot=400)
    expected = ((t1[1].mean() - t1[0].mean()) + (t2[1].mean() - t2[0].mean())) / 2
    assert centre == pytest.approx(expected, rel=1e-12)
    assert low <= high
    with pytest.raises(ValueError, match="same runs on every task"):
        stratified_seed_query_bootstrap([t1, (rng.random((3, 20)), rng.random((3, 20)))])
    with pytest.raises(ValueError, match="at least one task"):
        stratified_seed_query_bootstrap([])
