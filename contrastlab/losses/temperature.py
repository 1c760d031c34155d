"""A learnable temperature, log-parameterised and clamped like open_clip's ``logit_scale``."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from contrastlab._checks import check_positive_float

__all__ = ["LearnableTemperature"]


class LearnableTemperature(nn.Module):
    """τ = 1 / exp(s) with a learnable log-scale s, clamped so that 1/τ ≤ ``max_inverse``.

    Parameterising the inverse temperature on the log scale keeps τ > 0 under any gradient step and
    makes multiplicative changes additive (CLIP, Radford et al. 2021, §2.5: initial τ = 0.07; the
    clamp at 1/τ = 100 follows open_clip and prevents the collapse of τ towards 0 that destabilises
    training).

    Args:
        init: initial temperature τ₀ > 0.
        max_inverse: upper bound on 1/τ (the clamp); must be ≥ 1/init.

    Examples:
        >>> temp = LearnableTemperature(0.07)
        >>> round(float(temp()), 4)
        0.07
    """

    def __init__(self, init: float = 0.07, max_inverse: float = 100.0) -> None:
        super().__init__()
        init = check_positive_float("init", init)
        max_inverse = check_positive_float("max_inverse", max_inverse)
        if 1.0 / init > max_inverse:
            raise ValueError(f"max_inverse must be >= 1/init = {1.0 / init:g}, got {max_inverse:g}")
        self.init = init
        self.max_inverse = max_inverse
        self.log_scale = nn.Parameter(torch.tensor(math.log(1.0 / init)))

    def forward(self) -> Tensor:
        """Return τ as a 0-d tensor (differentiable in ``log_scale``)."""
        return torch.exp(-self.log_scale.clamp(max=math.log(self.max_inverse)))

    def extra_repr(self) -> str:
        """Hyperparameters shown in ``repr``."""
        return f"init={self.init}, max_inverse={self.max_inverse}"
