"""A small MoCo-style run (queue, momentum encoder, dropout, gradient caching) for the resume tests.

Run as a script: ``python _queue_run.py OUT_DIR STOP_AT`` trains with checkpoints every 5 steps and,
after step STOP_AT, prints "ready" and sleeps so that the parent can SIGKILL it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn

from contrastlab.train import OptimConfig, TrainConfig, TrainResult, fit, step_generator
from contrastlab.train.loop.queue import MomentumEncoder, NegativeQueue, queue_objective

STEPS, N, IN, D = 20, 12, 6, 4
CONFIG = TrainConfig(
    steps=STEPS, seed=5, log_every=2, checkpoint_every=5, progress=False, embed_minibatch=5,
    optim=OptimConfig(name="adam", lr=3e-3),
)  # fmt: skip


def batch_at(step: int) -> dict[str, torch.Tensor]:
    g = step_generator(2, step)
    x = torch.randn(N, IN, generator=g)
    return {"anchor": x, "positive": x + 0.2 * torch.randn(N, IN, generator=g)}


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, D))


def run(out: Path | None, *, resume: bool = False, on_step=None) -> tuple[TrainResult, NegativeQueue, MomentumEncoder]:
    model = make_model()
    queue = NegativeQueue(30, D)  # 30 rows: 2.5 steps of keys, so the pointer wraps mid-step
    key_encoder = MomentumEncoder(model, momentum=0.9)
    objective = queue_objective(queue, temperature=0.2, key_encoder=key_encoder)
    result = fit(
        model, objective, batch_at, CONFIG, out_dir=out, resume=resume, on_step=on_step,
        extra_state={"queue": queue, "key_encoder": key_encoder},
    )  # fmt: skip
    return result, queue, key_encoder


if __name__ == "__main__":
    torch.set_num_threads(1)
    out_dir, stop_at = Path(sys.argv[1]), int(sys.argv[2])

    def on_step(model: nn.Module, step: int, loss: torch.Tensor) -> None:
        if step == stop_at:
            print("ready", flush=True)
            time.sleep(60)

    run(out_dir, on_step=on_step)
