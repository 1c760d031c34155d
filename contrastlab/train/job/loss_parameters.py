"""The learnable parameters of a job's loss (τ, SigLIP's bias), trained and checkpointed with the encoder.

A :class:`~contrastlab.train.job.config.LossConfig` with ``learnable_temperature`` or ``learnable_bias``
gives a :class:`LossParameters` module, which :func:`~contrastlab.train.job.runner.build_encoder` attaches to the
encoder as its submodule ``loss_parameters``: the optimiser of :func:`~contrastlab.train.fit` then trains
it with the encoder's parameters, every checkpoint holds it (``loss_parameters.*`` keys next to the
encoder's own, which keep their names), and ``contrastlab eval`` and the audit rebuild it from the
config before loading the checkpoint. The encoder's ``forward`` never reads it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from contrastlab.losses import LearnableTemperature
from contrastlab.train.job.config import LossConfig

__all__ = ["LossParameters", "attached_loss_parameters"]


class LossParameters(nn.Module):
    """τ as a :class:`~contrastlab.losses.LearnableTemperature` and/or the logit bias as a parameter.

    Args:
        config: the loss; ``learnable_temperature`` starts τ at ``temperature`` with the clamp
            ``1/τ ≤ max_inverse_temperature``, ``learnable_bias`` starts b at :meth:`LossConfig.bias_init`.

    Raises:
        ValueError: a config with neither learnable parameter.
    """

    def __init__(self, config: LossConfig) -> None:
        super().__init__()
        if not (config.learnable_temperature or config.learnable_bias):
            raise ValueError("config has no learnable loss parameter (learnable_temperature, learnable_bias)")
        self.learned_temperature: LearnableTemperature | None = (
            LearnableTemperature(config.temperature, max_inverse=config.max_inverse_temperature)
            if config.learnable_temperature
            else None
        )
        bias = config.bias_init()
        self.learned_bias: nn.Parameter | None = (
            nn.Parameter(torch.tensor(float(bias))) if config.learnable_bias and bias is not None else None
        )

    def temperature(self, fixed: float) -> float | Tensor | nn.Module:
        """τ for the loss call: the learnable module, else ``fixed``."""
        return self.learned_temperature if self.learned_temperature is not None else fixed

    def bias(self, fixed: float | None) -> float | Tensor | None:
        """B for the loss call: the learnable parameter, else ``fixed``."""
        return self.learned_bias if self.learned_bias is not None else fixed

    def values(self) -> dict[str, float]:
        """The current learned values, for logs and results (``temperature``, ``bias``)."""
        out = {}
        if self.learned_temperature is not None:
            out["temperature"] = float(self.learned_temperature().detach())
        if self.learned_bias is not None:
            out["bias"] = float(self.learned_bias.detach())
        return out

    def forward(self) -> dict[str, float]:
        """The same as :meth:`values` (a module needs a forward; the loss reads the parameters directly)."""
        return self.values()


def attached_loss_parameters(model: nn.Module) -> LossParameters | None:
    """The :class:`LossParameters` that :func:`~contrastlab.train.job.runner.build_encoder` attached, or None."""
    params = getattr(model, "loss_parameters", None)
    return params if isinstance(params, LossParameters) else None
