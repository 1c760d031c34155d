"""A reference for the false-negative tests: InfoNCE with some columns left out, as a loop in float64."""

from __future__ import annotations

import math

import torch


def loss_without_columns(a: torch.Tensor, p: torch.Tensor, drop: list[list[bool]], tau: float) -> float:
    """ℓ_i = −s_ii/τ + log Σ_{j kept} e^{s_ij/τ} on cosine similarities, a loop over the kept columns (float64).

    Args:
        a: ``(N, D)`` anchors.
        p: ``(N, D)`` positives (row ``i`` is anchor ``i``'s).
        drop: ``drop[i][j]``: column ``j`` is left out of anchor ``i``'s denominator (never the diagonal).
        tau: the temperature.

    Returns:
        The mean of ``ℓ_i`` over the ``N`` anchors.
    """
    an = torch.nn.functional.normalize(a, dim=1)
    pn = torch.nn.functional.normalize(p, dim=1)
    total = 0.0
    for i in range(a.shape[0]):
        s = [float(an[i] @ pn[j]) / tau for j in range(a.shape[0]) if j == i or not drop[i][j]]
        total += -float(an[i] @ pn[i]) / tau + math.log(sum(math.exp(x) for x in s))
    return total / a.shape[0]
