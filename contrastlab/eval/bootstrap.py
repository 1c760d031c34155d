"""Percentile-bootstrap intervals of a mean over queries, paired when several models share the queries."""

from __future__ import annotations

import numpy as np

__all__ = ["bootstrap_mean"]


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
