"""Percentile-bootstrap intervals of a mean over queries, paired when several models share the queries.

* :func:`bootstrap_mean` — one set of queries: the mean and its interval, queries resampled;
* :func:`stratified_bootstrap_mean` — several tasks: the mean over tasks of each task's mean and its interval,
  queries resampled within each task (each task keeps its own number of queries in every resample).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["bootstrap_mean", "stratified_bootstrap_mean"]


def bootstrap_mean(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean of ``values`` (Q,) or of their row means (Q, R), and its 95% percentile-bootstrap interval.

    Queries are resampled with replacement; for a (Q, R) array each resample keeps a query's R values
    together (several models or seeds on the same queries: a paired bootstrap).

    Args:
        values: ``(Q,)`` or ``(Q, R)`` per-query values, Q ≥ 1, all finite.
        n_boot: resamples, ≥ 1.
        rng: the generator drawing the resamples.

    Returns:
        ``(mean, low, high)``: the mean and the 2.5% and 97.5% quantiles of the resampled means.

    Raises:
        ValueError: ``values`` empty, of more than 2 dimensions or not finite; ``n_boot`` < 1.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim not in (1, 2) or v.shape[0] < 1 or v.size < 1:
        raise ValueError(f"values must be a non-empty (Q,) or (Q, R) array, got shape {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError("values must be finite")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    v = v if v.ndim == 1 else v.mean(axis=1)
    idx = rng.integers(0, v.size, size=(n_boot, v.size))
    means = v[idx].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(v.mean()), float(low), float(high)


def stratified_bootstrap_mean(
    values: Sequence[np.ndarray], n_boot: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """The mean over tasks of each task's mean over queries, and its 95% percentile-bootstrap interval.

    Each resample draws, for every task ``t`` in turn, ``Q_t`` of its queries with replacement; the statistic
    of a resample is ``(1/T) Σ_t mean(resampled values of t)``, so every task weighs the same whatever its
    number of queries, and the interval reflects only the sampling of queries within the tasks (the tasks
    themselves are fixed).

    Args:
        values: one ``(Q_t,)`` array of per-query values per task, ``Q_t ≥ 1``, all finite.
        n_boot: resamples, ≥ 1.
        rng: the generator drawing the resamples (tasks in the given order, resamples in blocks).

    Returns:
        ``(mean, low, high)``: the mean of the task means and the 2.5% and 97.5% quantiles of the resampled ones.

    Raises:
        ValueError: no task, a task's values empty, not 1-D or not finite; ``n_boot`` < 1.
    """
    if len(values) == 0:
        raise ValueError("values must hold at least one task")
    vs = [np.asarray(v, dtype=np.float64) for v in values]
    for t, v in enumerate(vs):
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"values[{t}] must be a non-empty (Q,) array, got shape {v.shape}")
        if not np.isfinite(v).all():
            raise ValueError(f"values[{t}] must be finite")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    means = np.zeros(n_boot)
    for v in vs:
        chunk = max(1, (1 << 22) // v.size)  # at most 4M indices drawn at once
        for s in range(0, n_boot, chunk):
            m = min(chunk, n_boot - s)
            means[s : s + m] += v[rng.integers(0, v.size, size=(m, v.size))].mean(axis=1)
    means /= len(vs)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(np.mean([v.mean() for v in vs])), float(low), float(high)
