"""The norm paper's three claims as statistics with intervals, and whether a model shows each.

Su, Ren & Veitch (2026, arXiv 2606.30625; only the abstract is public) report that the pre-normalisation
norm ‖z‖ of a contrastive embedding correlates with token **frequency**, concept **specificity** and
**uncertainty**. The abstract gives no signs; the directions tested here (:data:`PREDICTED`) are

* frequency: ρ > 0 — the mechanism's prediction (an SGD step on a scale-invariant loss adds
  η²‖G‖²/‖z‖² to ‖z‖², so an item seen more often accumulates more norm);
* specificity: the specific word of a (specific, general) pair has the larger norm — the paper's
  title ("norms imprint semantic specificity") and Oyama et al. (2023, arXiv 2212.09663): the squared
  norm of a word vector tracks its information gain, larger for more specific words;
* uncertainty: a larger query norm goes with a right top-1 retrieval (AUROC > 0.5) — the norm as a
  "free" confidence, as Draganov et al. (2025, arXiv 2502.09252) find smaller norms for unexpected samples.

A claim is **shown** when the interval of its statistic excludes the null (ρ = 0, a paired difference of
0, AUROC = 0.5) on the predicted side, **opposite** when it excludes it on the other side, **not shown**
when it contains it (:func:`verdict`).

The statistics, pure functions on arrays:

* :func:`partial_spearman` / :func:`partial_spearman_bootstrap` — Spearman's ρ of x and y with
  covariates held fixed: rank every variable, regress the ranks of x and of y on the ranks of the
  covariates (with an intercept) by least squares, and correlate the residuals; the interval is a
  percentile bootstrap over items, re-ranking inside every resample;
* :func:`auroc_bootstrap` — the Mann–Whitney AUROC (ties ½) with a percentile bootstrap over queries;
* :func:`sign_fraction` — the share of pairs whose difference is positive (ties left out) with the
  exact Clopper–Pearson interval of the sign test;
* :func:`mean_bootstrap` and :func:`adjusted_difference` — the mean paired difference, and the intercept
  of the least-squares fit of the paired differences on the paired differences of covariates (the
  difference expected between two items of equal length), each with a percentile bootstrap over pairs;
* :func:`assess_frequency`, :func:`assess_specificity`, :func:`assess_uncertainty` — one
  :class:`ClaimResult` each: the statistic the verdict rests on, its verdict, and the other statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from contrastlab.eval.calibration import auroc
from contrastlab.eval.norms import spearman_bootstrap

__all__ = [
    "PREDICTED",
    "STATISTICS",
    "VERDICTS",
    "Estimate",
    "ClaimResult",
    "verdict",
    "partial_spearman",
    "partial_spearman_bootstrap",
    "auroc_bootstrap",
    "sign_fraction",
    "mean_bootstrap",
    "adjusted_difference",
    "assess_frequency",
    "assess_specificity",
    "assess_uncertainty",
]

PREDICTED: dict[str, str] = {
    "frequency": "ρ(norm, Zipf frequency) > 0 with length held fixed: frequent tokens have larger norms",
    "specificity": "log‖z_specific‖ − log‖z_general‖ > 0 at equal length: the more specific word has the larger norm",
    "uncertainty": "AUROC(norm → right top-1) > 0.5: a larger query norm goes with a right retrieval",
}
"""The direction each claim is tested in (the module docstring says where each comes from)."""

STATISTICS: dict[str, str] = {
    "frequency": "ρ(norm, Zipf | chars, tokens)",
    "specificity": "Δ log-norm, specific − general, at equal chars and tokens",
    "uncertainty": "AUROC(norm → right top-1)",
}
"""The statistic each claim's verdict rests on."""

VERDICTS = ("shown", "opposite", "not shown", "not measured")
"""What :func:`verdict` can say."""

MIN_CLASS = 10
"""An AUROC is not measured with fewer right (or wrong) queries than this: with a handful of one class,
resamples repeat the same few and the percentile interval collapses onto them."""

_CHUNK = 64  # bootstrap resamples solved at once: bounds memory to 64 × n × (1 + covariates) floats


@dataclass(frozen=True)
class Estimate:
    """A statistic with its interval.

    Attributes:
        value: the statistic on the whole sample (NaN when undefined).
        low: lower end of the interval (NaN when undefined).
        high: upper end of the interval.
        n: the number of units (items, pairs, queries) it was computed on.
    """

    value: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class ClaimResult:
    """One claim of the paper on one model.

    Attributes:
        claim: ``frequency``, ``specificity`` or ``uncertainty``.
        statistic: what :attr:`estimate` is (the statistic the verdict rests on).
        estimate: its value and interval.
        null: its value when the norm carries nothing.
        verdict: one of :data:`VERDICTS`.
        details: the other statistics of the claim, by name.
    """

    claim: str
    statistic: str
    estimate: Estimate
    null: float
    verdict: str
    details: dict[str, Estimate] = field(default_factory=dict)


def verdict(estimate: Estimate, *, null: float, direction: int = 1) -> str:
    """What an interval says about a claim predicted on the side ``direction`` of ``null`` (+1: above).

    ``shown`` if the interval excludes ``null`` on that side, ``opposite`` if on the other side, ``not
    shown`` if it contains it (an end equal to ``null`` included), ``not measured`` if it is undefined (NaN).
    """
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    low, high = estimate.low * direction, estimate.high * direction
    if not (math.isfinite(low) and math.isfinite(high)):
        return "not measured"
    lo, hi = min(low, high), max(low, high)
    if lo > null * direction:
        return "shown"
    if hi < null * direction:
        return "opposite"
    return "not shown"


# --------------------------------------------------------------------------------------------- helpers


def _vector(name: str, x: object, n: int | None = None) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have length {n}, got {a.shape[0]}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds NaN or Inf")
    return a


def _check_boot(n_boot: int, confidence: float) -> None:
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")


def _percentile(boots: np.ndarray, confidence: float) -> tuple[float, float]:
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        return float("nan"), float("nan")
    q = (1 - confidence) / 2
    return float(np.quantile(boots, q)), float(np.quantile(boots, 1 - q))


def _covariate_matrix(covariates: Mapping[str, object], n: int) -> np.ndarray:
    """``(n, p)`` float64, one column per covariate, in the mapping's order."""
    cols = [_vector(name, c, n) for name, c in covariates.items()]
    return np.stack(cols, axis=1) if cols else np.empty((n, 0))


def _residuals(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Least-squares residuals of each row of ``y`` ``(B, n)`` on ``[1, x]`` ``(B, n, p)``.

    Through the pseudo-inverse, so a constant or repeated covariate (rank deficiency) leaves the
    residuals well defined: they are those of the projection on the span of the columns.
    """
    design = np.concatenate([np.ones(x.shape[:2] + (1,)), x], axis=2)
    design[:, :, 1:] -= design[:, :, 1:].mean(axis=1, keepdims=True)  # centred columns: a better-conditioned solve
    beta = np.linalg.pinv(design) @ y[:, :, None]  # (B, 1 + p, 1)
    return y - (design @ beta)[:, :, 0]


def _pearson_rows(a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray) -> np.ndarray:
    """Row-wise Pearson correlation of residuals; NaN where a residual vanishes next to its variable's spread.

    ``scale_*``: ``(B,)`` the norm of the centred variable before residualisation; a residual below 1e-9
    of it is rounding left by a variable that the covariates determine, not a signal.
    """
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    na, nb = np.sqrt((a**2).sum(1)), np.sqrt((b**2).sum(1))
    ok = (na > 1e-9 * scale_a) & (nb > 1e-9 * scale_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, (a * b).sum(1) / (na * nb), np.nan)


def _partial_rank_corr(x: np.ndarray, y: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``(B,)`` partial Spearman ρ of rows ``x``, ``y`` ``(B, n)`` given ``cov`` ``(B, n, p)``: ranks inside each row."""
    rx, ry = stats.rankdata(x, axis=1), stats.rankdata(y, axis=1)
    rc = stats.rankdata(cov, axis=1) if cov.shape[2] else cov
    sx = np.sqrt(((rx - rx.mean(1, keepdims=True)) ** 2).sum(1))
    sy = np.sqrt(((ry - ry.mean(1, keepdims=True)) ** 2).sum(1))
    return _pearson_rows(_residuals(rx, rc), _residuals(ry, rc), sx, sy)


# ------------------------------------------------------------------------------------------ statistics


def partial_spearman(x: object, y: object, covariates: Mapping[str, object]) -> float:
    """Spearman's ρ of ``x`` and ``y`` with ``covariates`` held fixed (ranks residualised on ranks).

    With no covariates it is Spearman's ρ; with one covariate z it equals the partial-correlation formula
    (ρ_xy − ρ_xz ρ_yz) / √((1 − ρ_xz²)(1 − ρ_yz²)) on Spearman correlations.

    Args:
        x: ``(n,)`` values.
        y: ``(n,)`` values.
        covariates: name → ``(n,)`` values.

    Returns:
        ρ in ``[-1, 1]``; NaN when x or y is determined by the covariates (or constant).

    Raises:
        ValueError: naming an argument of the wrong shape, holding NaN, or with fewer than 3 items.
    """
    a = _vector("x", x)
    b = _vector("y", y, a.shape[0])
    cov = _covariate_matrix(covariates, a.shape[0])
    if a.shape[0] < cov.shape[1] + 3:
        raise ValueError(
            f"x must have at least {cov.shape[1] + 3} items for {cov.shape[1]} covariates, got {a.shape[0]}"
        )
    return float(_partial_rank_corr(a[None], b[None], cov[None])[0])


def partial_spearman_bootstrap(
    x: object,
    y: object,
    covariates: Mapping[str, object],
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> Estimate:
    """:func:`partial_spearman` with a percentile bootstrap interval (items resampled, ranks recomputed).

    Resamples where ρ is undefined are dropped; the interval is NaN if all are.
    """
    _check_boot(n_boot, confidence)
    rho = partial_spearman(x, y, covariates)
    a, b = _vector("x", x), _vector("y", y)
    cov = _covariate_matrix(covariates, a.shape[0])
    n = a.shape[0]
    boots = np.empty(n_boot)
    for s in range(0, n_boot, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_boot - s), n))
        boots[s : s + idx.shape[0]] = _partial_rank_corr(a[idx], b[idx], cov[idx])
    return Estimate(rho, *_percentile(boots, confidence), n)


def auroc_bootstrap(
    scores: object, correct: object, *, n_boot: int = 1000, confidence: float = 0.95, rng: np.random.Generator
) -> Estimate:
    """The AUROC of ``scores`` for ``correct`` (:func:`contrastlab.eval.calibration.auroc`) with a bootstrap interval.

    Resamples of queries holding one class only are dropped. NaN (and a NaN interval) when the sample
    holds fewer than :data:`MIN_CLASS` of either class.
    """
    _check_boot(n_boot, confidence)
    s = _vector("scores", scores)
    c = _vector("correct", correct, s.shape[0])
    if not np.isin(c, (0.0, 1.0)).all():
        raise ValueError("correct must hold only 0 and 1")
    n = s.shape[0]
    if min(c.sum(), n - c.sum()) < MIN_CLASS:
        return Estimate(float("nan"), float("nan"), float("nan"), n)
    value = auroc(s, c)
    boots = np.empty(n_boot)
    for start in range(0, n_boot, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_boot - start), n))
        ranks, pos = stats.rankdata(s[idx], axis=1), c[idx]
        n1 = pos.sum(1)
        n0 = n - n1
        with np.errstate(invalid="ignore", divide="ignore"):
            auc = ((ranks * pos).sum(1) - n1 * (n1 + 1) / 2) / (n1 * n0)
        boots[start : start + idx.shape[0]] = np.where((n1 > 0) & (n0 > 0), auc, np.nan)
    return Estimate(value, *_percentile(boots, confidence), n)


def sign_fraction(diff: object, *, confidence: float = 0.95) -> Estimate:
    """The share of positive differences among the non-zero ones, with the exact Clopper–Pearson interval.

    Under the sign test's null (each difference as likely positive as negative) the share is 0.5.
    ``n`` counts the non-zero differences; all zero gives NaN.
    """
    _check_boot(1, confidence)
    d = _vector("diff", diff)
    m, k = int((d != 0).sum()), int((d > 0).sum())
    if m == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    ci = stats.binomtest(k, m).proportion_ci(confidence_level=confidence, method="exact")
    return Estimate(k / m, float(ci.low), float(ci.high), m)


def mean_bootstrap(diff: object, *, n_boot: int = 1000, confidence: float = 0.95, rng: np.random.Generator) -> Estimate:
    """The mean of ``diff`` with a percentile bootstrap interval."""
    return adjusted_difference(diff, {}, n_boot=n_boot, confidence=confidence, rng=rng)


def adjusted_difference(
    diff: object,
    covariate_diffs: Mapping[str, object],
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> Estimate:
    """The paired difference expected at zero covariate differences, with a percentile bootstrap interval.

    The intercept a of the least-squares fit diff_i ≈ a + Σ_c b_c Δc_i over pairs i, where Δc_i is the
    pair's difference in covariate c (e.g. specific minus general word's length): the difference between
    two items that differ in none of the covariates. With no covariates it is the mean difference.

    Args:
        diff: ``(n,)`` paired differences.
        covariate_diffs: name → ``(n,)`` the pairs' differences in that covariate.
        n_boot: bootstrap resamples of the pairs.
        confidence: coverage of the interval.
        rng: numpy generator for the resampling.

    Raises:
        ValueError: naming an argument of the wrong shape or holding NaN; fewer pairs than
            covariates + 2.
    """
    _check_boot(n_boot, confidence)
    d = _vector("diff", diff)
    x = _covariate_matrix(covariate_diffs, d.shape[0])
    n, p = x.shape
    if n < p + 2:
        raise ValueError(f"diff must hold at least {p + 2} pairs for {p} covariates, got {n}")

    def intercepts(idx: np.ndarray) -> np.ndarray:
        design = np.concatenate([np.ones(idx.shape + (1,)), x[idx]], axis=2)  # uncentred: the intercept is at Δ = 0
        beta = np.linalg.pinv(design) @ d[idx][:, :, None]
        return beta[:, 0, 0]

    value = float(intercepts(np.arange(n)[None])[0])
    boots = np.empty(n_boot)
    for s in range(0, n_boot, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_boot - s), n))
        boots[s : s + idx.shape[0]] = intercepts(idx)
    return Estimate(value, *_percentile(boots, confidence), n)


# --------------------------------------------------------------------------------------------- claims


def assess_frequency(
    norms: object,
    zipf: object,
    *,
    chars: object,
    tokens: object,
    n_boot: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> ClaimResult:
    """Norm against Zipf frequency over items; the verdict rests on ρ with length (characters, tokens) fixed.

    Details: ``spearman`` (no covariate), ``partial_chars``, ``partial_tokens`` (one covariate each).
    """
    r = _vector("norms", norms)
    f = _vector("zipf", zipf, r.shape[0])
    length = {"chars": _vector("chars", chars, r.shape[0]), "tokens": _vector("tokens", tokens, r.shape[0])}

    def partial(covariates: dict[str, np.ndarray]) -> Estimate:
        return partial_spearman_bootstrap(r, f, covariates, n_boot=n_boot, confidence=confidence, rng=rng)

    main = partial(length)
    rho, lo, hi = spearman_bootstrap(r, f, n_boot=n_boot, confidence=confidence, rng=rng)
    details = {
        "spearman": Estimate(rho, lo, hi, r.shape[0]),
        "partial_chars": partial({"chars": length["chars"]}),
        "partial_tokens": partial({"tokens": length["tokens"]}),
    }
    return ClaimResult(
        "frequency",
        STATISTICS["frequency"],
        main,
        0.0,
        verdict(main, null=0.0),
        details,
    )


def assess_specificity(
    norm_specific: object,
    norm_general: object,
    *,
    chars: tuple[object, object],
    tokens: tuple[object, object],
    zipf: tuple[object, object],
    n_boot: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> ClaimResult:
    """Paired norms of (specific, general) items; the verdict rests on the log-norm difference at equal length.

    ``chars``, ``tokens``, ``zipf``: ``(specific, general)`` arrays of each pair's two items.

    Details: ``mean_log_ratio`` (unadjusted), ``sign_fraction`` (share of pairs whose specific item has the
    larger norm; null 0.5), ``adjusted_length_frequency`` (the intercept with Zipf frequency also held fixed).
    """
    ns = _vector("norm_specific", norm_specific)
    ng = _vector("norm_general", norm_general, ns.shape[0])
    if (ns <= 0).any() or (ng <= 0).any():
        raise ValueError("norm_specific and norm_general must be positive norms")
    d = np.log(ns) - np.log(ng)

    def delta(name: str, pair: tuple[object, object]) -> np.ndarray:
        return _vector(f"{name}[0]", pair[0], ns.shape[0]) - _vector(f"{name}[1]", pair[1], ns.shape[0])

    length = {"chars": delta("chars", chars), "tokens": delta("tokens", tokens)}

    def adjusted(covariates: dict[str, np.ndarray]) -> Estimate:
        return adjusted_difference(d, covariates, n_boot=n_boot, confidence=confidence, rng=rng)

    main = adjusted(length)
    details = {
        "mean_log_ratio": adjusted({}),
        "sign_fraction": sign_fraction(d, confidence=confidence),
        "adjusted_length_frequency": adjusted({**length, "zipf": delta("zipf", zipf)}),
    }
    return ClaimResult(
        "specificity",
        STATISTICS["specificity"],
        main,
        0.0,
        verdict(main, null=0.0),
        details,
    )


def assess_uncertainty(
    norms: object,
    softmax_top1: object,
    correct_top1: object,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> ClaimResult:
    """The query norm as a confidence for a right top-1 (AUROC, verdict), beside the softmax top-1 probability."""
    main = auroc_bootstrap(norms, correct_top1, n_boot=n_boot, confidence=confidence, rng=rng)
    details = {
        "auroc_softmax": auroc_bootstrap(softmax_top1, correct_top1, n_boot=n_boot, confidence=confidence, rng=rng)
    }
    return ClaimResult("uncertainty", STATISTICS["uncertainty"], main, 0.5, verdict(main, null=0.5), details)
