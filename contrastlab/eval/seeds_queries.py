"""Comparisons of two training recipes run with several seeds each, scored on the same queries.

A recipe's score varies with the training seed as well as with the queries it is judged on, so a difference
measured with one seed per arm (or an interval over queries alone) claims more than the data supports. With
``A`` an ``(S_A, Q)`` array of per-query scores (one row per seed of arm A) and ``B`` likewise ``(S_B, Q)`` on
the same queries, the estimate is ``D = mean(B) − mean(A)``, and its uncertainty comes from both levels.

The model behind both functions is the crossed random-effects model of a seed-by-query design,

    y[X, s, q] = μ_X + u[X, s] + v[q] + w[X, q] + e[X, s, q],

with ``u`` the seed effect of arm X (random, variance σ²_u,X), ``v`` the query's difficulty (shared by both
arms, so it cancels in ``D``), ``w`` the arm-by-query interaction and ``e`` the residual. Then

    Var(D) = σ²_u,A/S_A + σ²_u,B/S_B + Var(w_B − w_A)/Q + σ²_e,A/(S_A Q) + σ²_e,B/(S_B Q).

* :func:`seed_query_bootstrap` — ``D`` and its 95% two-level percentile-bootstrap interval: seeds resampled
  within each arm, then queries (one query resample shared by both arms, so the comparison stays paired).
  Resampling both levels counts the residual twice, so the interval errs on the wide side (Field & Welsh
  2007, "Bootstrapping clustered data", JRSS-B 69(3)).
* :func:`stratified_seed_query_bootstrap` — several tasks audited by the same runs: the mean over tasks of
  each task's ``D``, seeds resampled once per resample (a run is one trained model, audited on every task),
  queries within each task.
* :func:`seed_random_effect_test` — the test with the seed as a random effect: the method-of-moments
  (two-way ANOVA) estimate of ``Var(D)`` above, each term from its mean square, and a Welch–Satterthwaite
  t test (Satterthwaite 1946, "An approximate distribution of estimates of variance components",
  Biometrics Bulletin 2(6)). Its level is checked by simulation in the tests.

With one seed in an arm the seed variance of that arm cannot be estimated: both functions refuse, and
:mod:`contrastlab.eval.paired` (queries only) is the comparison to use. All are pure functions on arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["SeedQueryTest", "seed_query_bootstrap", "stratified_seed_query_bootstrap", "seed_random_effect_test"]


def _arms(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
            raise ValueError(f"{name} must be an (S, Q) array with S >= 2 seeds and Q >= 2 queries, got {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError(f"{name} must be finite")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must score the same queries, got {a.shape[1]} and {b.shape[1]} columns")
    return a, b


def seed_query_bootstrap(
    a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, rng: np.random.Generator | None = None
) -> tuple[float, float, float]:
    """``mean(b) − mean(a)`` and its 95% two-level percentile-bootstrap interval (seeds, then queries).

    Each resample draws ``S_A`` of A's seeds and ``S_B`` of B's with replacement, each arm on its own, and one
    set of ``Q`` queries with replacement used by both arms; the statistic is the difference of the resampled
    grand means.

    Args:
        a: ``(S_A, Q)`` arm A's per-query scores, one row per seed, S_A ≥ 2.
        b: ``(S_B, Q)`` arm B's on the same queries in the same order, S_B ≥ 2.
        n_boot: resamples, ≥ 1.
        rng: draws them (default: seeded with 0, so a result is reproducible).

    Returns:
        ``(mean, low, high)``.

    Raises:
        ValueError: an arm with fewer than 2 seeds or queries, non-finite scores, different queries, or
            ``n_boot`` < 1.
    """
    a, b = _arms(a, b)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    gen = rng if rng is not None else np.random.default_rng(0)
    (sa, q), sb = a.shape, b.shape[0]
    means = np.empty(n_boot)
    chunk = max(1, (1 << 22) // (max(sa, sb) * q))
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        rows_a = gen.integers(0, sa, size=(m, sa, 1))  # (m, S_A, 1) A's seeds drawn
        rows_b = gen.integers(0, sb, size=(m, sb, 1))  # (m, S_B, 1) B's seeds drawn
        cols = gen.integers(0, q, size=(m, 1, q))  # (m, 1, Q) queries drawn, shared by both arms
        means[start : start + m] = b[rows_b, cols].mean(axis=(1, 2)) - a[rows_a, cols].mean(axis=(1, 2))
    low, high = np.quantile(means, [0.025, 0.975])
    return float(b.mean() - a.mean()), float(low), float(high)


def stratified_seed_query_bootstrap(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], *, n_boot: int = 10_000, rng: np.random.Generator | None = None
) -> tuple[float, float, float]:
    """The mean over tasks of ``mean(b_t) − mean(a_t)`` and its 95% interval (seeds, then queries per task).

    Row s of every task's ``a_t`` is the same run of arm A (and likewise for B), so each resample draws the
    seeds once and uses them on every task; queries are drawn within each task.

    Args:
        pairs: one ``(a_t, b_t)`` per task, ``(S_A, Q_t)`` and ``(S_B, Q_t)``, the same ``S_A`` and ``S_B``
            on every task.
        n_boot: resamples, ≥ 1.
        rng: draws them (default: seeded with 0).

    Returns:
        ``(mean, low, high)``.

    Raises:
        ValueError: no task, a task's arms as :func:`seed_query_bootstrap` refuses them, or a seed count that
            differs between tasks.
    """
    if not pairs:
        raise ValueError("pairs must hold at least one task")
    arms = [_arms(a, b) for a, b in pairs]
    sa, sb = arms[0][0].shape[0], arms[0][1].shape[0]
    if any(a.shape[0] != sa or b.shape[0] != sb for a, b in arms):
        raise ValueError("pairs must hold the same runs on every task (the same number of seeds per arm)")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    gen = rng if rng is not None else np.random.default_rng(0)
    means = np.zeros(n_boot)
    longest = max(a.shape[1] for a, _ in arms)
    chunk = max(1, (1 << 22) // (max(sa, sb) * longest))
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        rows_a = gen.integers(0, sa, size=(m, sa, 1))  # (m, S_A, 1) the runs drawn, shared by every task
        rows_b = gen.integers(0, sb, size=(m, sb, 1))
        for a, b in arms:
            cols = gen.integers(0, a.shape[1], size=(m, 1, a.shape[1]))  # (m, 1, Q_t) this task's queries
            means[start : start + m] += b[rows_b, cols].mean(axis=(1, 2)) - a[rows_a, cols].mean(axis=(1, 2))
    means /= len(arms)
    centre = float(np.mean([b.mean() - a.mean() for a, b in arms]))
    low, high = np.quantile(means, [0.025, 0.975])
    return centre, float(low), float(high)


@dataclass(frozen=True)
class SeedQueryTest:
    """The random-effect test of ``mean(b) − mean(a) = 0`` (:func:`seed_random_effect_test`)."""

    difference: float
    """``mean(b) − mean(a)`` over every seed and query."""
    standard_error: float
    """The square root of the method-of-moments estimate of ``Var(D)``."""
    df: float
    """Welch–Satterthwaite degrees of freedom of the t reference distribution."""
    p: float
    """Two-sided p-value; 1 when the difference and its standard error are both 0."""
    seed_share: float
    """Share of the estimated variance that comes from the seeds (the two arms' seed terms)."""


def _seed_term(x: np.ndarray) -> tuple[float, float, float, float]:
    """One arm's two-way ANOVA without replication: (seed term, its df, residual term, its df).

    The seed term is ``MS_seed / (S Q)`` = ``var(row means) / S``, unbiased for ``σ²_u/S + σ²_e/(S Q)``; the
    residual term is ``MS_res / (S Q)``, unbiased for ``σ²_e/(S Q)``.
    """
    s, q = x.shape
    row, col, grand = x.mean(axis=1), x.mean(axis=0), x.mean()
    seed = float(row.var(ddof=1)) / s
    resid = x - row[:, None] - col[None, :] + grand
    ms_res = float((resid**2).sum()) / ((s - 1) * (q - 1))
    return seed, s - 1.0, ms_res / (s * q), (s - 1.0) * (q - 1.0)


def seed_random_effect_test(a: np.ndarray, b: np.ndarray) -> SeedQueryTest:
    """Test ``mean(b) − mean(a) = 0`` with the seed and the query both random (method of moments + Satterthwaite).

    The variance of ``D`` is estimated term by term from mean squares (module docstring): each arm's seed term
    ``var(row means)/S`` (``S − 1`` degrees of freedom); the query term ``var_q(d_q)/Q`` with ``d_q`` the
    difference of the two arms' seed-averaged scores on query q (``Q − 1`` degrees of freedom), less each arm's
    residual term, which both of the others already contain. The statistic ``D / SE`` is referred to a t
    distribution with Satterthwaite's degrees of freedom ``V² / Σ_i (c_i m_i)² / ν_i`` over the terms
    ``c_i m_i`` of the estimate. A negative estimate (possible only when the residual terms exceed the query
    term) is raised to the sum of the seed terms, its smallest unbiased part.

    Args:
        a: ``(S_A, Q)`` arm A's per-query scores, one row per seed, S_A ≥ 2.
        b: ``(S_B, Q)`` arm B's on the same queries in the same order, S_B ≥ 2.

    Returns:
        A :class:`SeedQueryTest`.

    Raises:
        ValueError: an arm with fewer than 2 seeds or queries, non-finite scores, or different queries.
    """
    a, b = _arms(a, b)
    q = a.shape[1]
    seed_a, df_a, res_a, dfr_a = _seed_term(a)
    seed_b, df_b, res_b, dfr_b = _seed_term(b)
    d_q = b.mean(axis=0) - a.mean(axis=0)
    query = float(d_q.var(ddof=1)) / q
    terms = np.array([seed_a, seed_b, query, -res_a, -res_b])
    dfs = np.array([df_a, df_b, q - 1.0, dfr_a, dfr_b])
    variance = float(terms.sum())
    if variance < seed_a + seed_b:
        variance, terms, dfs = seed_a + seed_b, terms[:2], dfs[:2]
    difference = float(b.mean() - a.mean())
    if variance <= 0.0:
        return SeedQueryTest(difference, 0.0, float("inf"), 1.0 if difference == 0.0 else 0.0, 0.0)
    df = variance**2 / float((terms**2 / dfs).sum())
    se = variance**0.5
    p = float(2.0 * stats.t.sf(abs(difference) / se, df))
    return SeedQueryTest(difference, se, float(df), p, (seed_a + seed_b) / variance)
