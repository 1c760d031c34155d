"""Seeded float64 inputs of the debiased and hard-negative losses in each negatives layout (shared by their tests)."""

import torch

from tests.losses._inputs import anchors_positives_negatives

#: The negatives layouts: in-batch, SimCLR's 2N views, shared ``(M, D)`` and per-anchor ``(N, K, D)``.
LAYOUTS = ("in-batch", "simclr", "shared", "per-anchor")


def mixed_noise(n: int) -> torch.Tensor:
    """Per-row noise: close positives (0.1) in even rows, far ones (2.0) in odd rows (clamped and not)."""
    return torch.tensor([0.1, 2.0], dtype=torch.float64).repeat((n + 1) // 2)[:n].unsqueeze(1)


def layout_inputs(layout: str, n: int, seed: int, noise: float | torch.Tensor = 0.8, d: int = 5):
    """Anchors, positives (anchor + noise: smaller noise, more rows clamped) and the layout's negatives.

    Six shared negatives, or four per anchor.
    """
    k = 6 if layout == "shared" else 4
    return anchors_positives_negatives(layout.replace("-", "_"), n, d, k, noise=noise, seed=seed)
