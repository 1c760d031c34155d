"""Gradient caching and the queue on 2 and 4 gloo processes give the one-process step (float64)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from _negatives_dist import LOSSES, runs, worker

from tests._spawn import spawn_ranks


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x - y).abs().max() / y.abs().max().clamp_min(1e-300))


@pytest.fixture(scope="module")
def single() -> dict:
    return runs(None)  # one process, no caching: one forward over the whole batch


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_cached_gathered_steps_on_gloo_ranks_equal_one_process(single, tmp_path: Path, world: int):
    spawn_ranks(worker, (world, os.path.join(tmp_path, "init"), str(tmp_path), 2), world)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(world)]
    # float64 throughout; the ranks sum the same terms in another order (rounding ~1e-16 relative),
    # amplified at most by the few optimiser steps of the queue runs
    # (the logged loss is fp32, as fit computes it: the mean of R fp32 shares, a few 2^-24 roundings)
    tol, loss_tol = 1e-10, 1e-6
    for name in LOSSES:
        for got in ranks:  # DDP leaves every rank with the averaged, i.e. the global, gradient
            for g, w in zip(got[name]["grads"], single[name]["grads"], strict=True):
                assert _rel(g, w) <= tol, (name, world)
            assert _rel(got[name]["loss"], single[name]["loss"]) <= loss_tol
    for key in ("queue_None", "queue_0.9"):
        first = ranks[0][key]
        for got in ranks[1:]:  # the queue is identical on every rank, bit for bit
            assert torch.equal(got[key]["queue"], first["queue"]) and torch.equal(got[key]["ptr"], first["ptr"])
        assert torch.equal(first["ptr"], single[key]["ptr"])
        assert _rel(first["queue"], single[key]["queue"]) <= tol, key
        assert _rel(first["loss"], single[key]["loss"]) <= loss_tol, key
        for p, q in zip(first["params"], single[key]["params"], strict=True):
            assert _rel(p, q) <= tol, key
