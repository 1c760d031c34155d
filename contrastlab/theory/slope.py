"""The fitted log-log slope of a gap against k: how fast a quantity approaches its k → ∞ limit.

Whiteley (2026, arXiv 2607.09405), Props. 1–2: the InfoNCE risk with k negatives is within O(1/k) of the
similarity-search cross-entropies, i.e. a slope of −1 on a log-log plot. Used by the k-gap experiment and
by ``contrastlab audit``'s risk curve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["fit_slope"]


def fit_slope(ks: Sequence[int], gaps: Sequence[float], ses: Sequence[float], *, k_min: int = 8) -> dict[str, Any]:
    """Least-squares slope of log|gap| against log k over the informative points.

    A point is informative when k >= ``k_min`` and |gap| > 3 standard errors. Whiteley's Props. 1–2
    predict slope −1 (O(1/k)).

    Returns:
        ``{"slope", "slope_se", "n_points", "k_range"}`` (slope ``None`` with fewer than 3 points).
    """
    pts = [(k, abs(g)) for k, g, s in zip(ks, gaps, ses, strict=True) if k >= k_min and abs(g) > 3 * s]
    if len(pts) < 3:
        return {"slope": None, "slope_se": None, "n_points": len(pts), "k_range": None}
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    a = np.vstack([x, np.ones_like(x)]).T
    coef, res, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ coef
    s2 = float(resid @ resid) / max(len(pts) - 2, 1)
    se = math.sqrt(s2 / float(((x - x.mean()) ** 2).sum()))
    return {"slope": float(coef[0]), "slope_se": se, "n_points": len(pts), "k_range": [pts[0][0], pts[-1][0]]}
