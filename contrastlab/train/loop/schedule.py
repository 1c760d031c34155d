"""Learning-rate schedule: linear warm-up, then constant, cosine (Loshchilov & Hutter 2017) or linear decay."""

from __future__ import annotations

import math
from typing import Any

from torch.optim import Optimizer

__all__ = ["lr_factor", "LRSchedule", "SCHEDULES"]

SCHEDULES = ("constant", "cosine", "linear")
"""The schedules :func:`lr_factor` knows."""


def lr_factor(step: int, *, total_steps: int, warmup_steps: int = 0, schedule: str = "constant") -> float:
    """Multiplier of the peak learning rate for the update with 0-based index ``step``.

    ``"constant"`` and ``"cosine"``: warm-up (``step < warmup_steps``) is ``(step + 1) / warmup_steps``, so
    the first update uses ``lr / warmup_steps`` and update ``warmup_steps - 1`` the full ``lr``. Afterwards
    ``1`` for ``"constant"``, or for ``"cosine"`` (SGDR, Loshchilov & Hutter 2017, arXiv 1608.03983, eq. 5
    with one cycle and η_min = 0) ``0.5 * (1 + cos(π t / T))`` with ``t = step - warmup_steps`` and
    ``T = total_steps - warmup_steps``: 1 right after warm-up, decaying towards 0 at the last update.

    ``"linear"``: the Hugging Face ``get_linear_schedule_with_warmup`` (sentence-transformers' default),
    value for value: ``step / warmup_steps`` during warm-up (the first update uses a learning rate of 0),
    then ``(total_steps - step) / (total_steps - warmup_steps)``, reaching 0 at ``step = total_steps``
    and never below it.

    Args:
        step: 0-based index of the optimiser update.
        total_steps: number of updates in the run.
        warmup_steps: length of the linear warm-up.
        schedule: "constant", "cosine" or "linear".

    Returns:
        The factor in [0, 1].

    Raises:
        ValueError: ``schedule`` unknown or negative ``step``.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if schedule == "linear":
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    t = min(step - warmup_steps, span)
    return 0.5 * (1.0 + math.cos(math.pi * t / span))


class LRSchedule:
    """Sets each parameter group's ``lr`` to ``base_lr * lr_factor(step)`` before update ``step``.

    A pure function of the step (no hidden counter), so resuming needs only the step and the base
    learning rates, which :meth:`state_dict` holds as plain floats.
    """

    def __init__(self, optimizer: Optimizer, *, total_steps: int, warmup_steps: int, schedule: str) -> None:
        self.optimizer = optimizer
        self.total_steps, self.warmup_steps, self.schedule = total_steps, warmup_steps, schedule
        self.base_lrs = [float(g["lr"]) for g in optimizer.param_groups]

    def apply(self, step: int) -> float:
        """Set the learning rates for update ``step``; return the first group's learning rate."""
        f = lr_factor(step, total_steps=self.total_steps, warmup_steps=self.warmup_steps, schedule=self.schedule)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * f
        return self.base_lrs[0] * f

    def state_dict(self) -> dict[str, Any]:
        """Plain-type state (loads under ``torch.load(weights_only=True)``)."""
        return {"base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the base learning rates."""
        self.base_lrs = [float(x) for x in state["base_lrs"]]
