"""A tiny deterministic training run shared by the trainer tests and their subprocesses.

Run as a script: ``python _tiny_run.py OUT_DIR STOP_AT [--threads N] [--fragment] [--resume]`` trains
with checkpoints every 5 steps and, after step STOP_AT (0: never), prints "ready" and sleeps so the parent
can SIGKILL (or SIGINT) it. ``--threads`` sets ``torch.set_num_threads`` (default 1), ``--fragment``
allocates and frees tensors of odd sizes first, so that the run's tensors land at other addresses and
alignments, and ``--resume`` continues from the checkpoint in OUT_DIR.
"""

from __future__ import annotations

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


def fragment_heap() -> list[torch.Tensor]:
    """Allocate blocks of odd sizes and free every other one: holes for the run's tensors to land in."""
    g = torch.Generator().manual_seed(123)
    blocks = [torch.rand(n, generator=g) for n in (1, 3, 7, 31, 1021, 4099, 65537, 262147, 1048583)]
    return blocks[::2]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("stop_at", type=int)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fragment", action="store_true")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kept = fragment_heap() if args.fragment else []

    def on_step(model: nn.Module, step: int, loss: torch.Tensor) -> None:
        if step == args.stop_at:
            print("ready", flush=True)
            time.sleep(60)

    fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=args.out, resume=args.resume, eval_fn=eval_fn, on_step=on_step)
