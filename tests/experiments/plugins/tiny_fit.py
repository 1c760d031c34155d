"""Tiny fit: a real (if small) experiment used to test the registry, runner, CLI and reports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from contrastlab.models import MLP
from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator


@dataclass(frozen=True)
class Config:
    steps: int = 40
    """optimiser steps"""
    temperature: float = 0.2
    """softmax temperature"""
    seed: int = 0
    """seed"""


QUICK = Config(steps=12)


def run(config: Config, out_dir: Path) -> dict:
    def batch_at(step: int) -> torch.Tensor:
        return torch.randn(32, 4, generator=step_generator(config.seed, step))

    def loss_fn(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        a = F.normalize(model(x), dim=1)
        p = F.normalize(model(x + 0.05 * torch.randn_like(x)), dim=1)
        return F.cross_entropy(a @ p.T / config.temperature, torch.arange(len(x)))

    torch.manual_seed(config.seed)
    cfg = TrainConfig(steps=config.steps, seed=config.seed, log_every=4, progress=False, optim=OptimConfig(lr=1e-2))
    result = fit(MLP(4, [16], 4), loss_fn, batch_at, cfg, out_dir=out_dir / "train")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contrastlab.io import atomic_path

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([r["step"] for r in result.history], [r["loss"] for r in result.history])
    with atomic_path(out_dir / "loss.png") as tmp:
        fig.savefig(tmp, dpi=60, format="png")
    plt.close(fig)
    first, last = result.history[0]["loss"], result.history[-1]["loss"]
    return {
        "summary": f"The loss fell from **{first:.3f}** to {last:.3f} in `{config.steps}` steps.",
        "metrics": {"first_loss": first, "final_loss": last},
        "tables": [
            {"title": "losses", "columns": ["step", "loss"], "rows": [[r["step"], r["loss"]] for r in result.history]}
        ],
        "figures": [{"file": "loss.png", "caption": "training loss"}],
    }
