"""Paired comparisons of two systems on the same queries: bootstrap interval, randomisation test, Holm.

Information retrieval compares systems query by query (Smucker, Allan & Carterette 2007, "A comparison of
statistical significance tests for information retrieval evaluation", CIKM): with ``d_q = b_q − a_q`` the
per-query difference of a metric, the null hypothesis that the two systems are exchangeable makes every
sign pattern of ``d`` equally likely, so the p-value of the observed ``|mean d|`` is the share of the ``2^Q``
sign flips whose ``|mean|`` is at least as large (two-sided). For ``Q ≤ exact_limit`` it is enumerated
exactly; beyond, ``n_perm`` random sign vectors estimate it (with the observed pattern counted, so ``p > 0``).

* :func:`randomization_test` — that p-value.
* :func:`bootstrap_difference` — ``mean d`` and its 95% percentile-bootstrap interval (queries resampled).
* :func:`stratified_bootstrap` — several tasks: the mean over tasks of each task's ``mean d`` and its
  interval, queries resampled within each task.
* :func:`holm` — Holm's step-down adjustment of a family of p-values (Holm 1979).

All are pure functions on arrays; nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from contrastlab.eval.bootstrap import stratified_bootstrap_mean

__all__ = ["randomization_test", "bootstrap_difference", "stratified_bootstrap", "holm", "EXACT_LIMIT"]

EXACT_LIMIT = 16
"""Up to this many queries the randomisation test enumerates all 2^Q sign flips (65,536)."""

_REL_TOL = 1e-12
"""Sign flips whose |mean| is within this relative tolerance of the observed one count as "as large": the
same statistic computed from a reordered sum can differ from the observed one in the last bits."""


def _differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"a and b must be non-empty (Q,) arrays of the same queries, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("a and b must be finite")
    return b - a


def randomization_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_perm: int = 100_000,
    rng: np.random.Generator | None = None,
    exact_limit: int = EXACT_LIMIT,
) -> float:
    """Two-sided paired randomisation (sign-flip) test of ``mean(b − a) = 0``.

    Args:
        a: ``(Q,)`` system A's per-query metric.
        b: ``(Q,)`` system B's, the same queries in the same order.
        n_perm: random sign vectors when ``Q > exact_limit`` (Smucker et al. used 100,000).
        rng: draws them (default: seeded with 0, so a result is reproducible).
        exact_limit: largest ``Q`` enumerated exactly.

    Returns:
        The p-value in (0, 1]; exactly 1 when every difference is 0.

    Raises:
        ValueError: arrays of different shapes, empty or not finite; ``n_perm`` < 1.
    """
    d = _differences(a, b)
    if isinstance(n_perm, bool) or not isinstance(n_perm, int) or n_perm < 1:
        raise ValueError(f"n_perm must be an int >= 1, got {n_perm!r}")
    q = d.size
    observed = abs(d.sum())
    tol = _REL_TOL * max(observed, np.abs(d).sum())
    if not np.any(d):
        return 1.0
    if q <= exact_limit:
        count = 0
        total = 1 << q
        chunk = 1 << 14
        bits = np.arange(q, dtype=np.int64)
        for start in range(0, total, chunk):
            codes = np.arange(start, min(start + chunk, total), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)  # (chunk, Q) every sign pattern once
            count += int((np.abs(signs @ d) >= observed - tol).sum())
        return count / total
    gen = rng if rng is not None else np.random.default_rng(0)
    count = 0
    chunk = max(1, (1 << 22) // q)
    for start in range(0, n_perm, chunk):
        m = min(chunk, n_perm - start)
        signs = 1.0 - 2.0 * gen.integers(0, 2, size=(m, q))
        count += int((np.abs(signs @ d) >= observed - tol).sum())
    return (count + 1) / (n_perm + 1)


def bootstrap_difference(
    a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, rng: np.random.Generator | None = None
) -> tuple[float, float, float]:
    """``mean(b − a)`` and its 95% percentile-bootstrap interval, queries resampled with replacement.

    Returns:
        ``(mean, low, high)``; ``(0, 0, 0)`` when every difference is 0.
    """
    d = _differences(a, b)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    gen = rng if rng is not None else np.random.default_rng(0)
    means = np.empty(n_boot)
    chunk = max(1, (1 << 22) // d.size)
    for s in range(0, n_boot, chunk):
        m = min(chunk, n_boot - s)
        means[s : s + m] = d[gen.integers(0, d.size, size=(m, d.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(d.mean()), float(low), float(high)


def stratified_bootstrap(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], *, n_boot: int = 10_000, rng: np.random.Generator | None = None
) -> tuple[float, float, float]:
    """The mean over tasks of each task's ``mean(b − a)``, and its 95% interval (queries resampled per task).

    Args:
        pairs: one ``(a, b)`` per task, each ``(Q_t,)`` arrays of that task's queries.
        n_boot: resamples.
        rng: draws them (default: seeded with 0).

    Returns:
        ``(mean, low, high)``.
    """
    if not pairs:
        raise ValueError("pairs must hold at least one task")
    ds = [_differences(a, b) for a, b in pairs]
    return stratified_bootstrap_mean(ds, n_boot, rng if rng is not None else np.random.default_rng(0))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): ``p_(i) · (m − i + 1)``, made monotone, capped at 1.

    Rejecting every hypothesis whose adjusted p is ≤ α controls the family-wise error rate at α.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or ((p < 0) | (p > 1) | ~np.isfinite(p)).any():
        raise ValueError("pvalues must be a 1-D array of probabilities")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adjusted
    return out
