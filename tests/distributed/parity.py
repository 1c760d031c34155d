"""Parity harness: a loss over a global batch in one process vs the same batch split over R ranks.

``check_parity(world_size)`` builds every case in :data:`CASES` from a seed, computes the loss and the
gradient of every input row in one process, then spawns ``world_size`` gloo processes on localhost
that each hold a contiguous slice of the rows (uneven splits included), compute their share with the
same loss called with ``gather=True`` and back-propagate. It returns, per case, the largest relative differences of
(i) the mean of the shares vs the single-process loss and (ii) each rank's input-row gradients divided
by R vs the single-process gradients of those rows (the convention in :mod:`contrastlab.distributed`).

Results travel between processes as tensors saved with ``torch.save`` and loaded with
``weights_only=True``.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from contrastlab.losses import info_nce, matryoshka, nt_xent, supcon
from contrastlab.losses.weince import GlobalBetaConfig, weince
from tests._spawn import spawn_ranks

__all__ = ["Case", "CASES", "check_parity", "split_sizes"]


@dataclass(frozen=True)
class Case:
    """One parity case: inputs from a seed, the single-process loss, and its distributed share.

    Attributes:
        name: identifier shown in reports.
        make: ``(generator, dtype) -> dict`` of named input tensors; row-split tensors first.
        split: names of the tensors whose rows are split across ranks (others are replicated).
        single: the loss on the full inputs, or ``(loss, state)`` for a loss with state (WEINCE's β_t).
        share: the loss share on one rank's slice (``gather=True``), or ``(share, state)``: every rank's
            state must equal the single-process state.
    """

    name: str
    make: Callable[[torch.Generator, torch.dtype], dict[str, Tensor]]
    split: tuple[str, ...]
    single: Callable[[dict[str, Tensor]], Tensor | tuple[Tensor, Tensor]]
    share: Callable[[dict[str, Tensor]], Tensor | tuple[Tensor, Tensor]]


def _pair(n: int, d: int) -> Callable[[torch.Generator, torch.dtype], dict[str, Tensor]]:
    def make(g: torch.Generator, dtype: torch.dtype) -> dict[str, Tensor]:
        a = torch.randn(n, d, generator=g, dtype=dtype)
        return {"a": a, "p": a + 0.7 * torch.randn(n, d, generator=g, dtype=dtype)}

    return make


def _crowded(n: int, d: int) -> Callable[[torch.Generator, torch.dtype], dict[str, Tensor]]:
    """Samples 0, 2, 4, … around 4 centres with spread 0.001 (in float32 those views crowd WEINCE's endpoint,
    1 − s ~ 1e-5), the others ordinary: every rank holds both kinds, and an ordinary anchor's crowded
    candidates may sit on another rank."""

    def make(g: torch.Generator, dtype: torch.dtype) -> dict[str, Tensor]:
        centres = torch.randn(4, d, generator=g, dtype=torch.float64)
        c = centres[torch.arange(n) % 4]
        noise = 1e-3 * torch.randn(2, n, d, generator=g, dtype=torch.float64)
        a, p = c + noise[0], c + noise[1]
        ordinary = torch.arange(1, n, 2)
        a[ordinary] = torch.randn(len(ordinary), d, generator=g, dtype=torch.float64)
        p[ordinary] = a[ordinary] + 0.7 * torch.randn(len(ordinary), d, generator=g, dtype=torch.float64)
        return {"a": a.to(dtype), "p": p.to(dtype)}

    return make


def _with(
    extra: str, shape: tuple[int, ...], base: Callable
) -> Callable[[torch.Generator, torch.dtype], dict[str, Tensor]]:
    def make(g: torch.Generator, dtype: torch.dtype) -> dict[str, Tensor]:
        out = base(g, dtype)
        out[extra] = torch.randn(*shape, generator=g, dtype=dtype)
        return out

    return make


def _labelled(n: int, d: int, classes: int) -> Callable[[torch.Generator, torch.dtype], dict[str, Tensor]]:
    def make(g: torch.Generator, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"z": torch.randn(n, d, generator=g, dtype=dtype), "y": torch.randint(0, classes, (n,), generator=g)}

    return make


def _kw(**kw: Any) -> dict[str, Any]:
    """Loss keyword arguments, typed for the lambdas below."""
    return kw


def _info_nce_cases() -> list[Case]:
    cases = []
    n, d = 11, 6  # 11 rows: uneven splits for every R in {2, 3, 4}
    # "/tiled": the tiled kernel under gather, in chunks that divide neither n_local nor N (single process: dense)
    for suffix, tiling in (("", {}), ("/tiled", {"chunk_size": 4})):
        for variant in ("infonce", "dcl"):
            for symmetric in (False, True):
                kw = _kw(temperature=0.3, variant=variant, symmetric=symmetric)
                cases.append(
                    Case(
                        f"info_nce/in-batch/{variant}/symmetric={symmetric}{suffix}",
                        _pair(n, d),
                        ("a", "p"),
                        lambda t, kw=kw: info_nce(t["a"], t["p"], **kw),
                        lambda t, kw=kw, tiling=tiling: info_nce(t["a"], t["p"], gather=True, **tiling, **kw),
                    )
                )
            kw = _kw(temperature=0.2, variant=variant)
            # shared negatives: each rank brings its own rows of the shared set; single process = all of them
            cases.append(
                Case(
                    f"info_nce/shared/{variant}{suffix}",
                    _with("neg", (9, d), _pair(n, d)),
                    ("a", "p", "neg"),
                    lambda t, kw=kw: info_nce(t["a"], t["p"], t["neg"], **kw),
                    lambda t, kw=kw, tiling=tiling: info_nce(t["a"], t["p"], t["neg"], gather=True, **tiling, **kw),
                )
            )
            if not tiling:
                cases.append(
                    Case(
                        f"info_nce/per-anchor/{variant}",
                        _with("neg", (n, 4, d), _pair(n, d)),
                        ("a", "p", "neg"),
                        lambda t, kw=kw: info_nce(t["a"], t["p"], t["neg"], **kw),
                        lambda t, kw=kw: info_nce(t["a"], t["p"], t["neg"], gather=True, **kw),
                    )
                )
    cases.append(
        Case(
            "info_nce/in-batch/sum/raw-dot",
            _pair(n, d),
            ("a", "p"),
            lambda t: info_nce(t["a"] / 3, t["p"] / 3, normalize=False, reduction="sum"),
            lambda t: info_nce(t["a"] / 3, t["p"] / 3, normalize=False, reduction="sum", gather=True),
        )
    )
    return cases


def _weince_cases() -> list[Case]:
    """WEINCE in every beta_mode, with and without the top-M terms, SimCLR views and explicit negatives.

    N = 23 samples (46 views, K = 44 negatives per view): per-anchor tails of 16 points, a global tail
    of 101 of the 2,024 negative similarities, λ_i spread over [0, 0.97]; uneven splits for R = 2, 4.
    The global_ema runs start from β = 3 in both runs and return the new β_t as state. The single
    process takes the fused one-block kernel where it applies; every share streams blocks of anchors
    (the ``chunk=`` cases in blocks of 3 or 4 of a rank's views, so that the last block is ragged). In
    the ``crowded`` case half the float32 views are within ENDPOINT_SHORTFALL of s = 1, so their shortfalls
    (their rows and columns) are recomputed in float64, by every rank for every rank's crowded views.
    """
    n, d = 23, 8
    base = {"temperature": 0.5, "min_tail": 16, "global_beta": GlobalBetaConfig(min_tail=64)}
    variants = [
        ("per_anchor", 0, None),
        ("one", 0, None),
        ("global_ema", 0, None),
        ("per_anchor", 5, None),
        ("global_ema", 5, None),
        ("global_ema", 0, "shared"),
        ("per_anchor", 0, "per-anchor"),
        ("one", 0, "tensor-temperature"),  # τ a tensor: its gradient from the streamed kernel
        ("per_anchor", 0, "chunk=3"),  # blocks of 3 local anchors: ragged last blocks on every rank
        ("global_ema", 5, "chunk=4"),
        ("per_anchor", 0, "crowded"),  # float32: the float64 shortfalls of every rank's crowded views
    ]
    cases = []
    for beta_mode, top_m, negs in variants:
        kw = _kw(**base, beta_mode=beta_mode, aux_top_m=top_m)
        chunk = None
        if negs == "tensor-temperature":
            kw["temperature"], negs = torch.tensor(0.4, dtype=torch.float64), None
        elif negs is not None and negs.startswith("chunk="):
            chunk, negs = int(negs.removeprefix("chunk=")), None
        stateful = beta_mode == "global_ema" or top_m > 0
        if stateful:
            kw |= {"beta_ema": 3.0, "return_stats": True}
        make = _pair(n, d)
        if negs == "crowded":
            make, negs = _crowded(n, d), None
            name_extra = "/crowded"
        else:
            name_extra = ""
        if negs == "shared":
            make = _with("neg", (30, d), make)
        elif negs == "per-anchor":
            make = _with("neg", (n, 20, d), make)

        def run(
            fn: Callable, t: dict[str, Tensor], kw: dict = kw, stateful: bool = stateful, chunk: int | None = None
        ) -> Tensor | tuple:
            out = fn(t["a"], t["p"], t.get("neg"), chunk_size=chunk, **kw)
            return (out[0], out[1].beta_ema) if stateful else out

        name = f"weince/{negs or 'simclr'}/{beta_mode}" + (f"/aux_top_m={top_m}" if top_m else "")
        name += "/tensor-temperature" if isinstance(kw["temperature"], Tensor) else ""
        name += (f"/chunk={chunk}" if chunk else "") + name_extra
        split = ("a", "p", "neg") if negs else ("a", "p")
        cases.append(
            Case(
                name,
                make,
                split,
                lambda t, run=run: run(weince, t),  # one process: the automatic (fused) path
                lambda t, run=run, chunk=chunk: run(functools.partial(weince, gather=True), t, chunk=chunk),
            )
        )
    return cases


def _matryoshka_cases() -> list[Case]:
    """Matryoshka over gathered losses: every width gathers on its own; the weighted sum of the shares."""
    n, d = 11, 6
    wrap = functools.partial(matryoshka, dims=(2, 4, d), weights=(1.0, 0.5, 2.0))
    sym = _kw(temperature=0.3, symmetric=True)
    cases = [
        Case(
            "matryoshka/info_nce/in-batch/symmetric",
            _pair(n, d),
            ("a", "p"),
            lambda t: wrap(functools.partial(info_nce, **sym), t["a"], t["p"]),
            lambda t: wrap(functools.partial(info_nce, gather=True, **sym), t["a"], t["p"]),
        ),
        Case(
            "matryoshka/info_nce/shared/dcl",
            _with("neg", (9, d), _pair(n, d)),
            ("a", "p", "neg"),
            lambda t: wrap(functools.partial(info_nce, variant="dcl"), t["a"], t["p"], t["neg"]),
            lambda t: wrap(functools.partial(info_nce, variant="dcl", gather=True), t["a"], t["p"], t["neg"]),
        ),
        Case(
            "matryoshka/nt_xent",
            _pair(n, d),
            ("a", "p"),
            lambda t: wrap(nt_xent, t["a"], t["p"]),
            lambda t: wrap(functools.partial(nt_xent, gather=True), t["a"], t["p"]),
        ),
        Case(
            "matryoshka/supcon",
            _labelled(13, d, 4),
            ("z", "y"),
            lambda t: wrap(supcon, t["z"], t["y"]),
            lambda t: wrap(functools.partial(supcon, gather=True), t["z"], t["y"]),
        ),
    ]
    weince_kw = _kw(temperature=0.5, min_tail=16)  # 23 samples: 44 negatives per view, 16-point tails
    cases.append(
        Case(
            "matryoshka/weince",
            _pair(23, 8),
            ("a", "p"),
            lambda t: matryoshka(functools.partial(weince, **weince_kw), t["a"], t["p"], dims=(6, 8)),
            lambda t: matryoshka(functools.partial(weince, gather=True, **weince_kw), t["a"], t["p"], dims=(6, 8)),
        )
    )
    return cases


CASES: list[Case] = [
    *_info_nce_cases(),
    Case(
        "nt_xent",
        _pair(11, 6),
        ("a", "p"),
        lambda t: nt_xent(t["a"], t["p"], temperature=0.5),
        lambda t: nt_xent(t["a"], t["p"], temperature=0.5, gather=True),
    ),
    Case(
        "nt_xent/tiled",
        _pair(11, 6),
        ("a", "p"),
        lambda t: nt_xent(t["a"], t["p"], temperature=0.5),
        lambda t: nt_xent(t["a"], t["p"], temperature=0.5, chunk_size=5, gather=True),
    ),
    Case(
        "supcon",
        _labelled(13, 5, 4),
        ("z", "y"),
        lambda t: supcon(t["z"], t["y"], temperature=0.2),
        lambda t: supcon(t["z"], t["y"], temperature=0.2, gather=True),
    ),
    *_weince_cases(),
    *_matryoshka_cases(),
]


def split_sizes(n: int, world: int) -> list[int]:
    """Contiguous, as-even-as-possible row counts per rank (the first ranks take the remainder)."""
    return [n // world + (1 if r < n % world else 0) for r in range(world)]  # as contrastlab.distributed.shard_rows


def _inputs(case: Case, seed: int, dtype: torch.dtype) -> dict[str, Tensor]:
    return case.make(torch.Generator().manual_seed(seed), dtype)


def _grads(
    fn: Callable[[dict[str, Tensor]], Tensor | tuple[Tensor, Tensor]], t: dict[str, Tensor]
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss and the gradient of every floating input; a returned state is stored as ``grads["state"]``."""
    leaves = {k: (v.detach().clone().requires_grad_() if v.is_floating_point() else v) for k, v in t.items()}
    out = fn(leaves)
    loss, state = out if isinstance(out, tuple) else (out, None)
    loss.backward()
    grads: dict[str, Tensor] = {}
    for k, v in leaves.items():
        if v.is_floating_point():
            if v.grad is None:
                raise RuntimeError(f"input {k!r} received no gradient")
            grads[k] = v.grad
    return loss.detach(), grads if state is None else {**grads, "state": state.detach()}


def _worker(r: int, world: int, init_file: str, out_dir: str, seed: int, dtype_names: list[str], prefix: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=r, world_size=world)
    try:
        for dtype_name, (i, case) in ((d, ic) for d in dtype_names for ic in enumerate(CASES)):
            if not case.name.startswith(prefix):
                continue
            dtype = getattr(torch, dtype_name)
            full = _inputs(case, seed, dtype)
            local = {}
            for k, v in full.items():
                if k in case.split:
                    sizes = split_sizes(v.shape[0], world)
                    start = sum(sizes[:r])
                    local[k] = v[start : start + sizes[r]]
                else:
                    local[k] = v
            share, grads = _grads(case.share, local)
            out = Path(out_dir) / f"{dtype_name}_{i}_{r}.pt"
            state = grads.pop("state", None)
            torch.save({"share": share, "state": state, **{f"grad_{k}": g for k, g in grads.items()}}, out)
    finally:
        dist.destroy_process_group()


def check_parity(
    world: int,
    *,
    seed: int = 0,
    dtypes: tuple[torch.dtype, ...] = (torch.float64, torch.float32),
    prefix: str = "",
) -> dict[tuple[str, torch.dtype], tuple[float, float]]:
    """Run every case (whose name starts with ``prefix``) over ``world`` gloo ranks (one spawn for all).

    Returns:
        ``{(case name, dtype): (relative error of the loss, max relative error of the row gradients)}``;
        gradient errors are relative to the largest single-process gradient entry of that input. For
        a case with state the loss error is the larger of the loss's and every rank's state's.
    """
    if isinstance(world, bool) or not isinstance(world, int) or world < 2:
        raise ValueError(f"world must be an int >= 2, got {world!r}")
    names = [str(d).removeprefix("torch.") for d in dtypes]
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        spawn_ranks(_worker, (world, init_file, tmp, seed, names, prefix), world)
        report: dict[tuple[str, torch.dtype], tuple[float, float]] = {}
        for (dtype, dtype_name), (i, case) in (
            (dd, ic)
            for dd in zip(dtypes, names, strict=True)
            for ic in enumerate(CASES)
            if ic[1].name.startswith(prefix)
        ):
            full = _inputs(case, seed, dtype)
            loss, grads = _grads(case.single, full)
            parts = [torch.load(Path(tmp) / f"{dtype_name}_{i}_{r}.pt", weights_only=True) for r in range(world)]
            shares = torch.stack([p["share"] for p in parts])
            loss_err = float((shares.mean() - loss).abs() / loss.abs().clamp_min(1e-30))
            state = grads.pop("state", None)
            if state is not None:  # every rank's state (e.g. the new β_t) equals the single-process one
                for p in parts:
                    loss_err = max(
                        loss_err, float((p["state"] - state).abs().max() / state.abs().max().clamp_min(1e-30))
                    )
            grad_err = 0.0
            for k, g in grads.items():
                dist_g = torch.cat([p[f"grad_{k}"] for p in parts]) / world
                grad_err = max(grad_err, float((dist_g - g).abs().max() / g.abs().max().clamp_min(1e-30)))
            report[(case.name, dtype)] = (loss_err, grad_err)
        return report
