"""Seeded anchors, positives and negatives in each of the losses' three negative layouts."""

import torch


def anchors_positives_negatives(
    layout: str,
    n: int,
    d: int,
    k: int,
    *,
    noise: float | torch.Tensor,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(a, p, negs)``: a ~ N(0, 1) of shape ``(n, d)``, p = a + ``noise``·N(0, 1), and ``layout``'s negatives.

    ``noise`` is a float or per-row, ``(n, 1)``. ``layout`` is ``"shared"`` (``(k, d)`` negatives), ``"per_anchor"`` (``(n, k, d)``) or anything else
    (``None``: in-batch). One generator seeded with ``seed`` draws a, the noise and the negatives in turn.
    """
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=dtype)
    p = a + noise * torch.randn(n, d, generator=g, dtype=dtype)
    negs = None
    if layout == "shared":
        negs = torch.randn(k, d, generator=g, dtype=dtype)
    elif layout == "per_anchor":
        negs = torch.randn(n, k, d, generator=g, dtype=dtype)
    return a, p, negs
