"""Runs shared by the multi-process tests of gradient caching and the queue (one process or a gloo rank).

Every run is a :func:`~contrastlab.train.fit` on a float64 encoder without dropout (ranks draw their
own dropout masks, so masks could not match one process) over the global batch of ``batch_at``; under
a process group ``fit`` shards the rows and wraps the model in DistributedDataParallel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from contrastlab.losses import info_nce, nt_xent, supcon
from contrastlab.train import EmbeddingObjective, OptimConfig, TrainConfig, fit, step_generator
from contrastlab.train.loop.queue import MomentumEncoder, NegativeQueue, queue_objective

N, IN, D, QUEUE = 10, 5, 4, 12  # 10 pairs: 5 + 5 rows on 2 ranks, 3 + 3 + 2 + 2 on 4; queue shared by 2 and 4

LOSSES = {
    "info_nce": lambda a, p, b: info_nce(a, p, temperature=0.2, gather=True),
    "info_nce_symmetric": lambda a, p, b: info_nce(a, p, temperature=0.2, symmetric=True, gather=True),
    "nt_xent": lambda a, p, b: nt_xent(a, p, temperature=0.5, gather=True),
    "supcon": lambda a, p, b: supcon(torch.cat([a, p]), torch.cat([b["labels"], b["labels"]]), gather=True),
}


def batch_at(step: int) -> dict[str, torch.Tensor]:
    g = step_generator(4, step)
    x = torch.randn(N, IN, generator=g, dtype=torch.float64)
    return {
        "anchor": x,
        "positive": x + 0.3 * torch.randn(N, IN, generator=g, dtype=torch.float64),
        "labels": torch.randint(0, 3, (N,), generator=g),
    }


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, 12), nn.Tanh(), nn.Linear(12, D)).double()


def _pairs(name: str) -> EmbeddingObjective:
    return EmbeddingObjective(
        inputs=lambda b: torch.cat([b["anchor"], b["positive"]]),
        loss=lambda e, b: LOSSES[name](*e.split(b["anchor"].shape[0]), b),
    )


def runs(embed_minibatch: int | None) -> dict[str, Any]:
    """Every case's first-step parameter gradients and history, and the queue runs' final state."""
    out: dict[str, Any] = {}
    for name in LOSSES:
        model, grads = _model(), []
        cfg = TrainConfig(steps=1, progress=False, embed_minibatch=embed_minibatch, optim=OptimConfig(name="sgd"))
        res = fit(
            model,
            _pairs(name),
            batch_at,
            cfg,
            on_step=lambda m, s, _, grads=grads: grads.extend(p.grad.clone() for p in m.parameters()),
        )
        out[name] = {"grads": grads, "loss": torch.tensor(res.history[-1]["loss"])}
    for momentum in (None, 0.9):
        model = _model()
        queue = NegativeQueue(QUEUE, D, dtype=torch.float64)
        key_encoder = None if momentum is None else MomentumEncoder(model, momentum)
        cfg = TrainConfig(steps=4, progress=False, embed_minibatch=embed_minibatch, optim=OptimConfig(lr=1e-2))
        res = fit(model, queue_objective(queue, temperature=0.2, key_encoder=key_encoder), batch_at, cfg)
        out[f"queue_{momentum}"] = {
            "params": [p.detach().clone() for p in model.parameters()],
            "queue": queue.buffer.clone(),
            "ptr": torch.tensor([queue.ptr, queue.count]),
            "loss": torch.tensor([h["loss"] for h in res.history]),
        }
    return out


def worker(rank: int, world: int, init_file: str, out_dir: str, embed_minibatch: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.save(runs(embed_minibatch), Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
