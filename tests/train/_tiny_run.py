"""A tiny deterministic training run shared by the trainer tests and their subprocesses.

Run as a script: ``python _tiny_run.py OUT_DIR STOP_AT`` trains with checkpoints every 5 steps and,
after step STOP_AT, prints "ready" and sleeps so the parent can SIGKILL (or SIGINT) it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from contrastlab.models import MLP
from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator

STEPS = 30
CONFIG = TrainConfig(
    steps=STEPS,
    seed=3,
    log_every=2,
    eval_every=10,
    checkpoint_every=5,
    progress=False,
    optim=OptimConfig(name="adamw", lr=3e-3, weight_decay=0.01, warmup_steps=4, schedule="cosine", grad_clip=2.0),
)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return MLP(6, [16], 4)


def batch_at(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = step_generator(11, step)
    x = torch.randn(32, 6, generator=g)
    return x, x + 0.1 * torch.randn(32, 6, generator=g)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    a = F.normalize(model(batch[0]), dim=1)
    p = F.normalize(model(batch[1]), dim=1)
    # Global RNG use inside the step (dropout-like noise) makes the RNG checkpointing matter. The noise is
    # drawn per logit: a constant per row would cancel in the softmax, and the seed would reach the loss
    # only through rounding. "noise" logs the step's first draw, a pure function of the seed.
    noise = 1e-3 * torch.randn(a.shape[0], p.shape[0])
    logits = a @ p.T / 0.2 + noise
    loss = F.cross_entropy(logits, torch.arange(a.shape[0]))
    return loss, {"align": float((a - p).detach().pow(2).sum(1).mean()), "noise": float(noise[0, 0])}


def eval_fn(model: nn.Module, step: int) -> dict[str, float]:
    x, _ = batch_at(10_000)
    return {"norm": float(model(x).norm(dim=1).mean()), "rand": float(torch.rand(()))}


if __name__ == "__main__":
    torch.set_num_threads(1)
    out, stop_at = Path(sys.argv[1]), int(sys.argv[2])

    def on_step(model: nn.Module, step: int, loss: torch.Tensor) -> None:
        if step == stop_at:
            print("ready", flush=True)
            time.sleep(60)

    fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=out, eval_fn=eval_fn, on_step=on_step)
