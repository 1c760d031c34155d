"""The ``encoder.lora`` block of a job config: train low-rank adapters instead of the text model's weights.

``encoder: {name: minilm, lora: {r: 8, alpha: 16, dropout: 0.0, targets: [query, value]}}`` freezes the text
model and trains LoRA adapters (Hu et al. 2021, arXiv 2106.09685) on the named linear layers, through peft
(:mod:`contrastlab.models.lora`; the optional extra ``contrastlab[lora]``). ``r: 0`` (the default) trains
the model itself. The exported sentence-transformers folder holds the merged weights and loads without peft.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from torch import nn

from contrastlab.config import ConfigError, check_fields

__all__ = ["LoRAConfig", "peft_installed"]


def peft_installed() -> bool:
    """Whether the ``peft`` package is importable."""
    return importlib.util.find_spec("peft") is not None


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters on a text encoder's linear layers (off at r = 0)."""

    r: int = 0
    """rank of the adapters (0: no adapters, the whole model trains)"""
    alpha: float = 16.0
    """scale α of the update (α/r) B A"""
    dropout: float = 0.0
    """dropout on the adapters' input, in [0, 1)"""
    targets: tuple[str, ...] = ("query", "value")
    """the linear layers to adapt, by name or its last parts (BERT: query, key, value, dense; Hu et al. adapt
    the query and value projections); a named layer outside the forward pass the loss sees (all its parameters
    frozen by the encoder, as BERT's pooler under mean pooling) gets no adapter"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.r < 0:
            raise ConfigError(f"r must be >= 0, got {self.r}")
        if not self.enabled:
            return
        if self.alpha <= 0:
            raise ConfigError(f"alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if not self.targets or any(not t for t in self.targets):
            raise ConfigError(f"targets must name at least one layer, got {list(self.targets)}")
        if not peft_installed():
            raise ConfigError("r > 0 needs the peft package: pip install 'contrastlab[lora]'")

    @property
    def enabled(self) -> bool:
        """Whether adapters are trained (r > 0)."""
        return self.r > 0

    def apply(self, model: nn.Module) -> nn.Module:
        """Inject the adapters into ``model`` (:func:`contrastlab.models.lora.apply_lora`) when enabled.

        Raises:
            ConfigError: a target that names no linear layer of ``model`` (``targets: …``).
        """
        if not self.enabled:
            return model
        from contrastlab.models.lora import apply_lora

        try:
            return apply_lora(model, r=self.r, alpha=self.alpha, dropout=self.dropout, targets=self.targets)
        except ValueError as err:
            raise ConfigError(str(err)) from None

    @classmethod
    def from_run(cls, encoder: dict[str, Any]) -> LoRAConfig:
        """The block as a run's ``config.json`` stores it under ``encoder`` (absent: no adapters)."""
        from contrastlab.config import from_dict

        return from_dict(cls, encoder.get("lora") or {}, _prefix="encoder.lora.")
