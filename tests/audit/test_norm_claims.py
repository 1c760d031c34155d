import math

import numpy as np
import pytest
from scipy import stats

from contrastlab.audit import norm_claims as nc
from contrastlab.audit.norm_claims import Estimate


def _ranks_naive_partial(x: np.ndarray, y: np.ndarray, covs: list[np.ndarray]) -> float:
    """Partial Spearman by explicit residualisation: lstsq of each variable's ranks on [1, ranks of covariates]."""
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    design = np.column_stack([np.ones(x.size), *[stats.rankdata(c) for c in covs]])
    ex = rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]
    ey = ry - design @ np.linalg.lstsq(design, ry, rcond=None)[0]
    return float(np.corrcoef(ex, ey)[0, 1])


def _world(n: int, seed: int) -> dict[str, np.ndarray]:
    """Words with a Zipf value, a length that shrinks with frequency (as in English) and a token count."""
    rng = np.random.default_rng(seed)
    zipf = rng.uniform(2.5, 7.5, n)
    chars = np.maximum(2, np.round(14 - 1.5 * zipf + rng.normal(0, 2, n)))
    tokens = 1 + (chars > 8) + (rng.uniform(size=n) < 0.2)  # ties, as a word-piece count has
    return {"zipf": zipf, "chars": chars, "tokens": tokens.astype(float)}


# ------------------------------------------------------------------------------ the statistics, naively


def test_partial_spearman_without_covariates_is_scipys_spearman_with_ties() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 6, 80).astype(float), rng.normal(size=80)
    assert nc.partial_spearman(x, y, {}) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_partial_spearman_with_one_covariate_is_the_partial_correlation_formula() -> None:
    w = _world(300, 1)
    rng = np.random.default_rng(1)
    norms = np.exp(0.1 * w["zipf"] - 0.05 * w["chars"] + rng.normal(0, 0.3, 300))
    r_xy = stats.spearmanr(norms, w["zipf"]).statistic
    r_xz = stats.spearmanr(norms, w["chars"]).statistic
    r_yz = stats.spearmanr(w["zipf"], w["chars"]).statistic
    formula = (r_xy - r_xz * r_yz) / math.sqrt((1 - r_xz**2) * (1 - r_yz**2))
    assert nc.partial_spearman(norms, w["zipf"], {"chars": w["chars"]}) == pytest.approx(formula, abs=1e-10)


def test_partial_spearman_with_two_covariates_is_explicit_residualisation() -> None:
    w = _world(250, 2)
    norms = np.random.default_rng(2).lognormal(size=250) + 0.1 * w["zipf"]
    ours = nc.partial_spearman(norms, w["zipf"], {"chars": w["chars"], "tokens": w["tokens"]})
    assert ours == pytest.approx(_ranks_naive_partial(norms, w["zipf"], [w["chars"], w["tokens"]]), abs=1e-10)


def test_partial_spearman_bootstrap_is_a_loop_of_resamples_reranked() -> None:
    w = _world(120, 3)
    norms = w["zipf"] + np.random.default_rng(3).normal(0, 2, 120)
    covs = {"chars": w["chars"], "tokens": w["tokens"]}
    est = nc.partial_spearman_bootstrap(norms, w["zipf"], covs, n_boot=150, rng=np.random.default_rng(7))
    rng = np.random.default_rng(7)
    boots = []
    for _ in range(150):
        i = rng.integers(0, 120, size=120)
        boots.append(_ranks_naive_partial(norms[i], w["zipf"][i], [w["chars"][i], w["tokens"][i]]))
    assert est.value == pytest.approx(_ranks_naive_partial(norms, w["zipf"], [w["chars"], w["tokens"]]), abs=1e-10)
    assert (est.low, est.high) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), abs=1e-10)
    assert est.n == 120


def test_partial_spearman_is_undefined_when_the_covariates_determine_a_variable() -> None:
    w = _world(100, 4)
    assert math.isnan(nc.partial_spearman(2 * w["chars"] + 1, w["zipf"], {"chars": w["chars"]}))


def test_auroc_bootstrap_is_the_mann_whitney_auroc_and_a_loop_of_resamples() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(5)
    correct = (rng.uniform(size=90) < 0.4).astype(float)
    scores = np.round(correct + rng.normal(size=90), 1)  # ties
    est = nc.auroc_bootstrap(scores, correct, n_boot=100, rng=np.random.default_rng(9))
    assert est.value == pytest.approx(roc_auc_score(correct, scores), abs=1e-12)
    rng = np.random.default_rng(9)
    boots = []
    for _ in range(100):
        i = rng.integers(0, 90, size=90)
        if 0 < correct[i].sum() < 90:
            boots.append(roc_auc_score(correct[i], scores[i]))
    assert (est.low, est.high) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), abs=1e-12)


@pytest.mark.parametrize("right", [0, 1, nc.MIN_CLASS - 1, 50 - nc.MIN_CLASS + 1, 50])
def test_auroc_with_too_few_of_a_class_is_not_measured(right: int) -> None:
    correct = (np.arange(50) < right).astype(float)
    est = nc.auroc_bootstrap(np.arange(50.0), correct, n_boot=10, rng=np.random.default_rng(0))
    assert math.isnan(est.value) and nc.verdict(est, null=0.5) == "not measured"


def test_sign_fraction_is_the_exact_binomial_interval_without_ties() -> None:
    d = np.array([0.3, -0.1, 0.2, 0.0, 0.5, 0.4, -0.2, 0.1, 0.0, 0.7])
    est = nc.sign_fraction(d)
    ref = stats.binomtest(6, 8).proportion_ci(0.95, method="exact")
    assert (est.value, est.low, est.high, est.n) == (6 / 8, ref.low, ref.high, 8)


def test_adjusted_difference_is_the_least_squares_intercept_and_without_covariates_the_mean() -> None:
    rng = np.random.default_rng(6)
    dc, dt = rng.integers(-4, 5, 60).astype(float), rng.integers(-1, 2, 60).astype(float)
    d = 0.2 + 0.05 * dc - 0.1 * dt + rng.normal(0, 0.1, 60)
    est = nc.adjusted_difference(d, {"chars": dc, "tokens": dt}, n_boot=50, rng=np.random.default_rng(0))
    ref = np.linalg.lstsq(np.column_stack([np.ones(60), dc, dt]), d, rcond=None)[0][0]
    assert est.value == pytest.approx(ref, abs=1e-12)
    mean = nc.mean_bootstrap(d, n_boot=200, rng=np.random.default_rng(1))
    rng = np.random.default_rng(1)
    boots = [d[rng.integers(0, 60, size=60)].mean() for _ in range(200)]
    assert mean.value == pytest.approx(d.mean(), abs=1e-12)
    assert (mean.low, mean.high) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), abs=1e-12)


@pytest.mark.parametrize(
    ("low", "high", "direction", "expected"),
    [
        (0.1, 0.3, 1, "shown"),
        (-0.3, -0.1, 1, "opposite"),
        (-0.1, 0.2, 1, "not shown"),
        (0.0, 0.2, 1, "not shown"),  # an interval that reaches the null does not exclude it
        (-0.3, -0.1, -1, "shown"),
        (float("nan"), float("nan"), 1, "not measured"),
    ],
)
def test_verdict(low: float, high: float, direction: int, expected: str) -> None:
    assert nc.verdict(Estimate(0.0, low, high, 10), null=0.0, direction=direction) == expected


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: nc.partial_spearman([1, 2, 3], [1, 2], {}), "y must have length 3"),
        (lambda: nc.partial_spearman([1, 2, 3, 4], [1, 2, 3, float("nan")], {}), "y holds NaN"),
        (lambda: nc.partial_spearman([1, 2, 3], [1, 2, 3], {"chars": [1, 2, 3]}), "x must have at least 4"),
        (lambda: nc.sign_fraction(np.ones((2, 2))), "diff must be 1-D"),
        (lambda: nc.auroc_bootstrap([1, 2], [0, 2], rng=np.random.default_rng(0)), "correct must hold only"),
        (lambda: nc.mean_bootstrap([1.0, 2.0], n_boot=0, rng=np.random.default_rng(0)), "n_boot"),
    ],
)
def test_bad_input_names_the_argument(call: object, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()  # type: ignore[operator]


# --------------------------------------------------------------- synthetic worlds where the answer is known


def test_a_norm_that_encodes_frequency_is_shown_with_length_held_fixed() -> None:
    w = _world(1500, 10)
    rng = np.random.default_rng(10)
    norms = np.exp(0.1 * w["zipf"] + 0.02 * w["chars"] + rng.normal(0, 0.1, 1500))
    res = nc.assess_frequency(norms, w["zipf"], chars=w["chars"], tokens=w["tokens"], n_boot=300, rng=rng)
    assert res.verdict == "shown" and res.estimate.low > 0.3
    assert set(res.details) == {"spearman", "partial_chars", "partial_tokens"}


def test_a_norm_that_tracks_length_only_shows_frequency_raw_but_not_with_length_held_fixed() -> None:
    w = _world(2000, 11)
    rng = np.random.default_rng(11)
    norms = np.exp(-0.1 * w["chars"] + rng.normal(0, 0.05, 2000))  # short words are frequent and have larger norms
    res = nc.assess_frequency(norms, w["zipf"], chars=w["chars"], tokens=w["tokens"], n_boot=300, rng=rng)
    assert res.details["spearman"].low > 0.3  # the raw correlation is the confound
    assert res.verdict == "not shown" and res.estimate.low < 0 < res.estimate.high


def _mirrored(values: np.ndarray) -> np.ndarray:
    """Each item twice: once with y, once with c − y, so the ranks of y mirror those of the copy."""
    return np.concatenate([values, values.max() + values.min() - values])


def test_mirrored_norms_have_a_partial_correlation_of_exactly_zero_and_an_interval_around_it() -> None:
    """Items (x_i, y_i, c_i) and (x_i, m − y_i, c_i): every covariance of y's ranks with x's or c's cancels."""
    w = _world(800, 12)
    norms = np.exp(0.1 * w["zipf"] + np.random.default_rng(12).normal(0, 0.1, 800))
    zipf = _mirrored(w["zipf"])
    twice = {k: np.concatenate([w[k], w[k]]) for k in ("chars", "tokens")}
    norms2 = np.concatenate([norms, norms])
    assert abs(nc.partial_spearman(norms2, zipf, twice)) < 1e-12
    res = nc.assess_frequency(
        norms2, zipf, chars=twice["chars"], tokens=twice["tokens"], n_boot=300, rng=np.random.default_rng(0)
    )
    assert res.verdict == "not shown" and res.estimate.low < -0.02 and res.estimate.high > 0.02


def test_permuted_norms_show_nothing_at_the_nominal_rate() -> None:
    """The shuffled world: norms carry frequency, then are permuted over the items. Each draw's 95% interval
    must exclude 0 about 5% of the time; 100 draws excluding it more than 15 times has probability < 1e-4
    under a valid interval."""
    w = _world(200, 13)
    norms = np.exp(0.2 * w["zipf"])
    rng = np.random.default_rng(13)
    found = 0
    for _ in range(100):
        est = nc.partial_spearman_bootstrap(
            rng.permutation(norms), w["zipf"], {"chars": w["chars"]}, n_boot=200, rng=rng
        )
        found += nc.verdict(est, null=0.0) != "not shown"
    assert found <= 15


def _pairs(n: int, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    chars_s, chars_g = rng.integers(3, 12, n).astype(float), rng.integers(3, 12, n).astype(float)
    zipf_s, zipf_g = rng.uniform(2, 5, n), rng.uniform(4, 7, n)
    return {
        "chars": (chars_s, chars_g),
        "tokens": (1 + (chars_s > 8).astype(float), 1 + (chars_g > 8).astype(float)),
        "zipf": (zipf_s, zipf_g),
    }


def test_a_norm_that_encodes_specificity_is_shown_at_equal_length() -> None:
    p = _pairs(120, 20)
    rng = np.random.default_rng(20)
    base = rng.lognormal(size=120)
    ns, ng = base * np.exp(0.3 + 0.02 * p["chars"][0]), base * np.exp(0.02 * p["chars"][1])  # specific: ×e^0.3
    ns, ng = ns * np.exp(rng.normal(0, 0.1, 120)), ng * np.exp(rng.normal(0, 0.1, 120))
    res = nc.assess_specificity(ns, ng, **p, n_boot=500, rng=rng)
    assert res.verdict == "shown" and res.estimate.low > 0.2
    assert res.details["sign_fraction"].low > 0.5


def test_a_norm_that_tracks_length_only_shows_no_specificity_at_equal_length() -> None:
    p = _pairs(120, 21)
    p["chars"] = (p["chars"][0] + 3, p["chars"][1])  # the specific words are longer
    rng = np.random.default_rng(21)
    ns, ng = (np.exp(0.1 * c + rng.normal(0, 0.05, 120)) for c in p["chars"])
    res = nc.assess_specificity(ns, ng, **p, n_boot=500, rng=rng)
    assert res.details["mean_log_ratio"].low > 0.1  # longer, so larger: the raw difference is the confound
    assert res.verdict == "not shown"


def test_swapped_pairs_show_no_specificity_by_construction() -> None:
    """Every pair also appears swapped: the differences are ±d with covariate differences ±Δ, so the share is
    exactly one half, the mean and the intercept exactly zero, and every interval holds its null."""
    p = _pairs(60, 22)
    rng = np.random.default_rng(22)
    ns, ng = np.exp(0.3 + rng.normal(0, 0.2, 60)), np.exp(rng.normal(0, 0.2, 60))
    both = {k: (np.concatenate([a, b]), np.concatenate([b, a])) for k, (a, b) in p.items()}
    res = nc.assess_specificity(np.concatenate([ns, ng]), np.concatenate([ng, ns]), **both, n_boot=500, rng=rng)
    assert res.details["sign_fraction"].value == 0.5 and abs(res.details["mean_log_ratio"].value) < 1e-12
    assert abs(res.estimate.value) < 1e-12
    assert res.verdict == "not shown"
    assert all(nc.verdict(e, null=0.5 if k == "sign_fraction" else 0.0) == "not shown" for k, e in res.details.items())


def test_a_norm_larger_on_right_retrievals_shows_uncertainty_and_a_random_one_does_not() -> None:
    rng = np.random.default_rng(30)
    correct = (rng.uniform(size=600) < 0.5).astype(float)
    softmax = np.clip(0.5 + 0.3 * (correct - 0.5) + rng.normal(0, 0.2, 600), 0, 1)
    shown = nc.assess_uncertainty(1 + 0.5 * correct + rng.normal(0, 0.3, 600), softmax, correct, n_boot=300, rng=rng)
    assert shown.verdict == "shown" and shown.details["auroc_softmax"].low > 0.5
    # the mirror world: every query twice, right and wrong with the same norm: AUROC exactly 1/2
    norms = rng.lognormal(size=300)
    null = nc.assess_uncertainty(
        np.concatenate([norms, norms]), np.ones(600), np.repeat([1.0, 0.0], 300), n_boot=300, rng=rng
    )
    assert null.estimate.value == 0.5 and null.verdict == "not shown"


def test_a_constant_covariate_changes_nothing() -> None:
    """Every word one token: the token count is collinear with the intercept and must drop out, not break the fit."""
    w = _world(300, 40)
    norms = w["zipf"] + np.random.default_rng(40).normal(0, 1, 300)
    with_ones = nc.partial_spearman_bootstrap(
        norms, w["zipf"], {"chars": w["chars"], "tokens": np.ones(300)}, n_boot=50, rng=np.random.default_rng(0)
    )
    without = nc.partial_spearman_bootstrap(
        norms, w["zipf"], {"chars": w["chars"]}, n_boot=50, rng=np.random.default_rng(0)
    )
    assert with_ones.value == pytest.approx(without.value, abs=1e-12)
    assert (with_ones.low, with_ones.high) == pytest.approx((without.low, without.high), abs=1e-12)
    d = norms - norms.mean() + 0.1
    assert nc.adjusted_difference(
        d, {"zero": np.zeros(300)}, n_boot=10, rng=np.random.default_rng(0)
    ).value == pytest.approx(0.1, abs=1e-12)
