"""Alignment and uniformity (Wang & Isola 2020), as metrics and as losses.

Wang & Isola, "Understanding Contrastive Representation Learning through Alignment and Uniformity
on the Hypersphere", ICML 2020, eqs. 4–5:

    L_align(α) = E ‖f(x) − f(y)‖₂^α                   over positive pairs, α = 2 by default;
    L_uniform(t) = log E exp(−t ‖f(x) − f(x')‖₂²)     over distinct pairs, t = 2 by default.

Lower is better for both. For unit vectors ‖u − v‖² = 2 − 2⟨u, v⟩, which is what we compute (it has
a finite gradient for coincident points, unlike a pairwise distance followed by a square).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from contrastlab._checks import check_embeddings, check_positive_float, check_same_device, compute_dtype
from contrastlab.losses._common import l2_normalize

__all__ = ["alignment", "uniformity"]


def alignment(x: Tensor, y: Tensor, *, alpha: float = 2.0, normalize: bool = True) -> Tensor:
    """Mean α-th power distance between paired embeddings.

    Args:
        x: embeddings. Shape ``(N, D)``.
        y: their positives, row-paired with ``x``. Shape ``(N, D)``.
        alpha: the power α > 0 (Wang & Isola use 2).
        normalize: L2-normalise rows first (the metric is defined on the hypersphere).

    Returns:
        A scalar tensor (float32, or float64 for float64 inputs).
    """
    check_embeddings("x", x, ndim=2)
    check_embeddings("y", y, ndim=2)
    if y.shape != x.shape:
        raise ValueError(f"y must have the same shape as x {tuple(x.shape)}, got {tuple(y.shape)}")
    check_same_device(x=x, y=y)
    alpha = check_positive_float("alpha", alpha)
    dtype = compute_dtype(x, y)
    a, b = x.to(dtype), y.to(dtype)
    if normalize:
        a, b = l2_normalize(a), l2_normalize(b)
    sq = (a - b).pow(2).sum(dim=1)
    # ‖·‖^α = (‖·‖²)^{α/2}; for α = 2 this avoids the square root (and its infinite slope at 0).
    return sq.mean() if alpha == 2.0 else sq.clamp_min(0).pow(alpha / 2).mean()


def uniformity(x: Tensor, *, t: float = 2.0, normalize: bool = True) -> Tensor:
    """Log of the mean Gaussian potential over all distinct pairs i < j.

    Args:
        x: embeddings, N ≥ 2. Shape ``(N, D)``.
        t: the potential's scale t > 0 (Wang & Isola use 2).
        normalize: L2-normalise rows first.

    Returns:
        A scalar tensor; −4 ≤ value ≤ 0 for unit vectors with t = 2 (−4 only in the limit).
    """
    check_embeddings("x", x, ndim=2)
    if x.shape[0] < 2:
        raise ValueError(f"x must have at least 2 rows for pairwise uniformity, got N = {x.shape[0]}")
    t = check_positive_float("t", t)
    dtype = compute_dtype(x)
    z = x.to(dtype)
    if normalize:
        z = l2_normalize(z)
    sqn = z.pow(2).sum(dim=1)
    d2 = (sqn.unsqueeze(0) + sqn.unsqueeze(1) - 2.0 * (z @ z.T)).clamp_min(0)  # (N, N) squared distances
    iu = torch.triu_indices(z.shape[0], z.shape[0], offset=1, device=z.device)
    pair = d2[iu[0], iu[1]]
    return torch.logsumexp(-t * pair, dim=0) - math.log(pair.numel())
