"""WEINCE's options with the stop-gradient statistics held fixed, shared by the dense and streamed gradchecks.

λ is fixed and β is 1 (``beta_mode="one"``) or a global β_t that a tail of fewer than 10 points cannot
update (:data:`FROZEN_GLOBAL_BETA`), so the analytic gradient is the finite-difference one.
"""

import torch

from contrastlab.losses.weince import GlobalBetaConfig

#: The option sets both gradchecks run (each test adds its own).
FIXED_STATISTICS = [
    {"fixed_lambda": 0.3, "beta_mode": "one"},
    {"fixed_lambda": 1.0, "beta_mode": "global_ema", "beta_ema": 2.5},
    {"fixed_lambda": 0.6, "beta_mode": "one", "aux_top_m": 3},
]

#: A global β configuration whose tail of 4 × 3 views is too short to move β_t.
FROZEN_GLOBAL_BETA = GlobalBetaConfig(tail_frac=0.01, min_tail=1)


def float64_views() -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """Two seeded float64 views ``(4, 3)`` that require grad, and the generator for further inputs."""
    g = torch.Generator().manual_seed(2)
    za = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    zb = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    return za, zb, g
