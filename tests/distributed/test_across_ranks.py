"""Two gloo ranks: checks about the batch use the global batch, and one rank's bad input fails every rank alike.

Each scenario runs in 2 spawned processes (gloo on localhost, a 60 s collective timeout so that a
hang fails the test instead of stalling it). A rank records either its loss share and input gradients,
or the type and message of the error it raised; the test compares them with one process.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from contrastlab.losses import (
    debiased_info_nce,
    hard_negative_info_nce,
    info_nce,
    nt_xent,
    siglip,
    supcon,
    weince,
)
from tests._spawn import spawn_ranks

WORLD = 2
SIZES = [1, 5]  # rank 0 holds one row: DCL and WEINCE need the global N, not the local one


def _rows(t: torch.Tensor, r: int) -> torch.Tensor:
    start = sum(SIZES[:r])
    return t[start : start + SIZES[r]]


def _pair(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(sum(SIZES), 5, generator=g, dtype=torch.float64)
    return {"a": a, "p": a + 0.6 * torch.randn(sum(SIZES), 5, generator=g, dtype=torch.float64)}


def _mask_weights(m: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(sum(SIZES), m, generator=g) < 0.3
    mask.fill_diagonal_(False)  # DCL keeps negatives
    w = 0.5 + torch.rand(sum(SIZES), m, generator=g, dtype=torch.float64)
    w[0, 3] = 0.0  # a candidate left out
    return {"mask": mask, "w": w}


# name -> (inputs, loss of the (local or full) inputs with gather); the same callable serves one process
LOSS_CASES: dict[str, tuple[Callable[[], dict[str, torch.Tensor]], Callable[..., torch.Tensor]]] = {
    "dcl": (lambda: _pair(0), lambda t, **kw: info_nce(t["a"], t["p"], variant="dcl", temperature=0.3, **kw)),
    "dcl/raw-dot": (
        lambda: _pair(1),
        lambda t, **kw: info_nce(t["a"], t["p"], variant="dcl", normalize=False, temperature=0.5, **kw),
    ),
    "dcl/symmetric": (
        lambda: _pair(2),
        lambda t, **kw: info_nce(t["a"], t["p"], variant="dcl", symmetric=True, temperature=0.3, **kw),
    ),
    "nt_xent": (lambda: _pair(3), lambda t, **kw: nt_xent(t["a"], t["p"], **kw)),
    # positive_mask / weights rows go with their anchors; their columns are the candidates of every rank
    "info_nce/masked": (
        lambda: {**_pair(7), **_mask_weights(6, seed=7)},
        lambda t, **kw: info_nce(t["a"], t["p"], positive_mask=t["mask"], weights=t["w"], temperature=0.3, **kw),
    ),
    "dcl/masked/tiled": (
        lambda: {**_pair(8), **_mask_weights(6, seed=8)},
        lambda t, **kw: info_nce(
            t["a"], t["p"], variant="dcl", positive_mask=t["mask"], weights=t["w"], chunk_size=2, **kw
        ),
    ),
    "info_nce/shared/masked": (
        lambda: {**_pair(9), "neg": _pair(10)["a"], **_mask_weights(6, seed=9)},
        lambda t, **kw: info_nce(t["a"], t["p"], t["neg"], positive_mask=t["mask"], weights=t["w"], **kw),
    ),
    "supcon": (
        lambda: {"a": _pair(4)["a"], "y": torch.tensor([0, 1, 0, 1, 2, 2])},
        lambda t, **kw: supcon(t["a"], t["y"], **kw),
    ),
    "weince": (lambda: _pair(5), lambda t, **kw: weince(t["a"], t["p"], min_tail=4, **kw)),
    "siglip": (lambda: _pair(11), lambda t, **kw: siglip(t["a"], t["p"], temperature=0.5, bias=-1.0, **kw)),
    # debiased / hard-negative: N − 1 (or 2N − 2) negatives of the global batch; τ⁺ = 0.3 clamps 6 of the 12 rows
    "debiased": (lambda: _pair(12), lambda t, **kw: debiased_info_nce(t["a"], t["p"], tau_plus=0.1, **kw)),
    "debiased/simclr/clamp": (
        lambda: _pair(13),
        lambda t, **kw: debiased_info_nce(t["a"], t["p"], tau_plus=0.3, simclr=True, **kw),
    ),
    "hard_negative": (
        lambda: _pair(14),
        lambda t, **kw: hard_negative_info_nce(t["a"], t["p"], tau_plus=0.1, beta=1.0, **kw),
    ),
    "hard_negative/simclr/tiled": (
        lambda: _pair(15),
        lambda t, **kw: hard_negative_info_nce(t["a"], t["p"], tau_plus=0.1, beta=0.5, simclr=True, chunk_size=2, **kw),
    ),
    "hard_negative/shared": (
        lambda: {**_pair(16), "neg": _pair(17)["a"]},
        lambda t, **kw: hard_negative_info_nce(t["a"], t["p"], t["neg"], tau_plus=0.05, beta=2.0, **kw),
    ),
}


def _bad_inputs(r: int, scenario: str) -> Callable[[], torch.Tensor]:
    t = {k: _rows(v, r).clone() for k, v in _pair(6).items()}
    if scenario == "nan-on-rank-1":
        if r == 1:
            t["p"][2, 1] = float("nan")
        return lambda: info_nce(t["a"], t["p"], gather=True)
    if scenario == "int-on-rank-0":
        a = t["a"].long() if r == 0 else t["a"]
        return lambda: nt_xent(a, t["p"], gather=True)
    if scenario == "weince-shape-on-rank-1":
        p = t["p"][:, :3] if r == 1 else t["p"]
        return lambda: weince(t["a"], p, gather=True)
    if scenario == "overflow-on-rank-1":  # raw dot products of 1e200-sized rows overflow on rank 1 only
        a, p = (t["a"] * 1e200, t["p"] * 1e200) if r == 1 else (t["a"], t["p"])
        return lambda: info_nce(a, p, negatives=torch.ones(3, 5, dtype=torch.float64), normalize=False, gather=True)
    if scenario == "siglip-nan-on-rank-0":
        if r == 0:
            t["a"][0, 0] = float("nan")
        return lambda: siglip(t["a"], t["p"], gather=True)
    if scenario == "tau-plus-on-rank-1":
        tau_plus = 1.0 if r == 1 else 0.1
        return lambda: hard_negative_info_nce(t["a"], t["p"], tau_plus=tau_plus, gather=True)
    if scenario == "supcon-all-singletons":
        y = torch.arange(sum(SIZES))
        return lambda: supcon(t["a"], _rows(y, r), gather=True)
    raise KeyError(scenario)


BAD_SCENARIOS = [
    "nan-on-rank-1",
    "int-on-rank-0",
    "weince-shape-on-rank-1",
    "overflow-on-rank-1",
    "supcon-all-singletons",
    "siglip-nan-on-rank-0",
    "tau-plus-on-rank-1",
]


def _worker(r: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=r, world_size=WORLD, timeout=timedelta(seconds=60)
    )
    try:
        for name, (make, fn) in LOSS_CASES.items():
            t = {k: _rows(v, r).clone() for k, v in make().items()}  # negatives too: 1 and 5 of 6
            leaves = {k: v.requires_grad_() if v.is_floating_point() else v for k, v in t.items()}
            share = fn(leaves, gather=True)
            share.backward()
            grads = {f"grad_{k}": v.grad for k, v in leaves.items() if v.is_floating_point()}
            torch.save({"share": share.detach(), **grads}, Path(out_dir) / f"{name.replace('/', '_')}_{r}.pt")
        for scenario in BAD_SCENARIOS:
            try:
                _bad_inputs(r, scenario)()
                outcome = {"error": "", "message": ""}
            except (ValueError, TypeError) as e:
                outcome = {"error": type(e).__name__, "message": str(e)}
            torch.save(outcome, Path(out_dir) / f"{scenario}_{r}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results():
    with tempfile.TemporaryDirectory() as tmp:
        spawn_ranks(_worker, (os.path.join(tmp, "init"), tmp), WORLD)
        yield {p.stem: torch.load(p, weights_only=True) for p in Path(tmp).glob("*.pt") if p.name != "init"}


@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted(LOSS_CASES))
def test_uneven_ranks_equal_one_process(results, name):
    # The mean of the shares is the loss of one process over the 6 rows; each rank's input gradient is
    # R times the one-process gradient of its rows (float64: the sums differ only in order, 1e-12).
    make, fn = LOSS_CASES[name]
    full = {k: v.requires_grad_() if v.is_floating_point() else v for k, v in make().items()}
    loss = fn(full)
    loss.backward()
    parts = [results[f"{name.replace('/', '_')}_{r}"] for r in range(WORLD)]
    shares = torch.stack([p["share"] for p in parts])
    torch.testing.assert_close(shares.mean(), loss.detach(), rtol=1e-12, atol=0)
    for k, v in full.items():
        if k == "w":  # weights are constants: no gradient reaches them
            assert v.grad is None and all(p["grad_w"] is None for p in parts)
        elif v.is_floating_point():
            got = torch.cat([p[f"grad_{k}"] for p in parts]) / WORLD
            torch.testing.assert_close(got, v.grad, rtol=1e-10, atol=1e-14)


@pytest.mark.distributed
@pytest.mark.parametrize("scenario", BAD_SCENARIOS)
def test_one_bad_rank_fails_every_rank_alike(results, scenario):
    outcomes = [results[f"{scenario}_{r}"] for r in range(WORLD)]
    assert outcomes[0] == outcomes[1], outcomes  # the same error type and message on both ranks
    expected = {
        "nan-on-rank-1": ("ValueError", "positive contains NaN or Inf entries (on rank 1 of 2)"),
        "int-on-rank-0": ("TypeError", "z_a must be a floating-point tensor, got dtype torch.int64 (on rank 0 of 2)"),
        "weince-shape-on-rank-1": (
            "ValueError",
            "z_b must have the same shape as z_a (5, 5), got (5, 3) (on rank 1 of 2)",
        ),
        "supcon-all-singletons": ("ValueError", "labels: every anchor is a singleton"),
        "overflow-on-rank-1": ("ValueError", "anchor/positive/negatives: the loss is not finite"),
        "siglip-nan-on-rank-0": ("ValueError", "anchor contains NaN or Inf entries (on rank 0 of 2)"),
        "tau-plus-on-rank-1": ("ValueError", "tau_plus must be in [0, 1), got 1.0 (on rank 1 of 2)"),
    }[scenario]
    assert outcomes[0]["error"] == expected[0]
    assert outcomes[0]["message"].startswith(expected[1]), outcomes[0]["message"]


def test_dcl_on_one_row_without_gather_still_raises():
    # The check uses the global N under gather; without it (one process, N = 1) DCL has no negatives.
    a = torch.randn(1, 4)
    with pytest.raises(ValueError, match="^anchor: variant='dcl' with in-batch negatives needs N >= 2"):
        info_nce(a, a, variant="dcl")
    with pytest.raises(ValueError, match="^anchor: variant='dcl'"):
        info_nce(a, a, variant="dcl", gather=True)  # no process group: the global batch is this one
