"""Collectives for scale-out on torch.distributed: rank, world size, gathers with exact gradients.

Without a process group everything here degrades to one process: ``rank() == 0``,
``world_size() == 1`` and the gathers are identities, so one code path serves a laptop and torchrun.
This package holds collectives only and imports no loss; each loss gathers through it with
``gather=True`` (in one process the gather does nothing).

The scheme ("local loss", as in open_clip): each rank keeps its own anchors and contrasts them with
the candidates gathered from every rank. Memory per rank is then O(n_local × N_global), linear in the
global batch. ``gather_with_grad`` all-gathers in the forward pass and, in the backward pass, sums
the gradient of every rank's loss with respect to this rank's rows (an all-reduce of the gathered
gradient followed by taking one's own slice) — the step that peers have got wrong (an all-reduce
without a backward leaves gradients off by 1/world_size; see docs/distributed.md).

Gradient convention, stated once: a loss called with ``gather=True`` returns on rank r a share s_r
such that (1/R) Σ_r s_r equals the single-process loss over the global batch (:func:`share`).
DistributedDataParallel averages parameter gradients over ranks, so training with these shares gives
exactly the single-process parameter gradient; the gradient that arrives at rank r's *input rows* is
R times the single-process gradient of those rows (the parity harness of the test suite checks this).

Errors across ranks: :func:`agree` runs a rank's input checks and exchanges the outcome before any
compute, so that when one rank's input is invalid every rank raises the same error (naming the rank)
instead of waiting in a collective the failed rank never reaches.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = [
    "rank",
    "world_size",
    "is_distributed",
    "init_from_env",
    "local_device",
    "shard_rows",
    "barrier",
    "gather_with_grad",
    "gather_no_grad",
    "all_reduce_mean",
    "all_reduce_sum",
    "all_sizes",
    "agree",
    "share",
]


def is_distributed() -> bool:
    """Whether a torch.distributed process group is initialised."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank, 0 without a process group."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of processes, 1 without a process group."""
    return dist.get_world_size() if is_distributed() else 1


def init_from_env(*, timeout_s: float = 600.0, backend: str | None = None) -> bool:
    """Initialise the process group from torchrun's environment when ``WORLD_SIZE`` > 1.

    Args:
        timeout_s: collective timeout. A rank that dies makes the others fail with an error after
            at most this long instead of hanging (torchrun also stops the survivors at once).
        backend: "gloo" or "nccl"; default nccl with CUDA, else gloo.

    Returns:
        Whether a process group is (now) initialised.
    """
    if is_distributed():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return True


def local_device(device: torch.device) -> torch.device:
    """Under torchrun with CUDA, the GPU of this rank (``cuda:LOCAL_RANK``); otherwise ``device``."""
    if device.type == "cuda" and device.index is None and is_distributed():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if world_size() > 1:
        dist.barrier()


def shard_rows(batch: Any, *, global_rows: int | None = None) -> Any:
    """This rank's contiguous share of every tensor in ``batch`` that has ``global_rows`` rows.

    ``batch`` may be a tensor or a (nested) tuple/list/dict of tensors. Shares are as even as
    possible in rank order (the first ``n mod R`` ranks take one row more), so the ranks'
    shares concatenated in rank order are the global batch. Tensors with another leading size (e.g.
    a shared bank of negatives (M, D) when M differs) are split the same way only when they
    have ``global_rows`` rows; pass them separately otherwise. In one process returns ``batch``.
    """
    if world_size() == 1:
        return batch

    def rows(b: Any) -> int | None:
        if isinstance(b, Tensor) and b.ndim > 0:
            return b.shape[0]
        if isinstance(b, (list, tuple)):
            return next((r for r in map(rows, b) if r is not None), None)
        if isinstance(b, dict):
            return next((r for r in map(rows, b.values()) if r is not None), None)
        return None

    n = global_rows if global_rows is not None else rows(batch)
    if n is None:
        return batch
    r, w = rank(), world_size()
    sizes = [n // w + (1 if i < n % w else 0) for i in range(w)]
    start = sum(sizes[:r])

    def cut(b: Any) -> Any:
        if isinstance(b, Tensor):
            return b[start : start + sizes[r]] if b.ndim > 0 and b.shape[0] == n else b
        if isinstance(b, tuple) and hasattr(b, "_fields"):
            return type(b)(*(cut(x) for x in b))
        if isinstance(b, (list, tuple)):
            return type(b)(cut(x) for x in b)
        if isinstance(b, dict):
            return {k: cut(v) for k, v in b.items()}
        return b

    return cut(batch)


def _all_sizes(n: int, device: torch.device) -> list[int]:
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world_size())]
    dist.all_gather(sizes, torch.tensor([n], dtype=torch.long, device=device))
    return [int(s) for s in sizes]


def _gather_padded(x: Tensor, sizes: list[int]) -> Tensor:
    """All-gather rows of possibly different counts per rank (padded to the largest, then cut)."""
    m = max(sizes)
    pad = x.new_zeros((m - x.shape[0], *x.shape[1:]))
    xp = torch.cat([x, pad]) if m > x.shape[0] else x.contiguous()
    parts = [torch.empty_like(xp) for _ in sizes]
    dist.all_gather(parts, xp)
    return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)])


class _GatherWithGrad(torch.autograd.Function):
    """All-gather rows forward; backward sums every rank's gradient and returns this rank's slice."""

    @staticmethod
    def forward(ctx, x: Tensor, sizes: list[int], offset: int) -> Tensor:  # type: ignore[override]
        ctx.offset, ctx.n = offset, x.shape[0]
        return _gather_padded(x, sizes)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.offset : ctx.offset + ctx.n], None, None


def gather_with_grad(x: Tensor) -> tuple[Tensor, int]:
    """All-gather ``x`` of shape ``(n_local, ...)`` along dim 0, differentiably.

    Ranks may hold different numbers of rows. Without a process group returns ``(x, 0)``.

    Returns:
        ``(gathered, offset)``: the ``(N_global, ...)`` concatenation in rank order, and the index of
        this rank's first row in it.
    """
    if world_size() == 1:
        return x, 0
    sizes = _all_sizes(x.shape[0], x.device)
    offset = sum(sizes[: rank()])
    return _GatherWithGrad.apply(x, sizes, offset), offset


def gather_no_grad(x: Tensor) -> Tensor:
    """All-gather ``x`` along dim 0 without a gradient (labels, statistics)."""
    if world_size() == 1:
        return x
    return _gather_padded(x.detach(), _all_sizes(x.shape[0], x.device))


def all_reduce_mean(x: Tensor) -> Tensor:
    """The mean of ``x`` over ranks, detached (for logging a loss share as the global loss)."""
    if world_size() == 1:
        return x.detach()
    y = x.detach().clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y / world_size()


def all_reduce_sum(x: Tensor) -> Tensor:
    """The sum of ``x`` over ranks, detached (counts, statistics); ``x`` itself in one process."""
    if world_size() == 1:
        return x.detach()
    y = x.detach().clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y


def all_sizes(n: int, device: torch.device | None = None) -> list[int]:
    """Every rank's ``n`` in rank order (``[n]`` in one process)."""
    if world_size() == 1:
        return [n]
    return _all_sizes(n, device or torch.device("cpu"))


def share(per_row: Tensor, reduction: str, count: int, *, gather: bool) -> Tensor:
    """Rank r's share s_r of a reduction over the global batch: (1/R) Σ_r s_r is the global reduction.

    Args:
        per_row: this rank's per-row losses. Shape ``(n,)``.
        reduction: ``"mean"`` (over ``count`` rows of every rank), ``"sum"`` or ``"none"`` (``per_row``).
        count: the number of rows the mean divides by, over every rank.
        gather: whether the loss gathered across ranks; without it (or in one process) this is the
            plain reduction, ``per_row.mean()`` (for ``count = n``) or ``per_row.sum()``.
    """
    if reduction == "none":
        return per_row
    r = world_size() if gather else 1
    if r == 1 and reduction == "mean" and count == per_row.shape[0]:
        return per_row.mean()
    total = per_row.sum() if r == 1 else per_row.sum() * r
    return total / count if reduction == "mean" else total


_ERROR_TYPES: tuple[type[Exception], ...] = (ValueError, TypeError)


def agree(check: Callable[[], int], *, gather: bool, device: torch.device | None = None) -> list[int]:
    """Run this rank's input ``check`` and agree with every rank on the outcome before any compute.

    ``check`` validates this rank's inputs (raising ``ValueError`` or ``TypeError``) and returns its
    number of rows. Without ``gather`` or a process group it is simply called. Otherwise every rank
    sends its row count and its error, if any (an error code and the message's UTF-8 bytes, as
    tensors: nothing is pickled); when any rank failed, every rank raises the lowest failing rank's
    error type with its message and the rank appended, so no rank is left waiting in a collective
    that a failed rank never reaches.

    Returns:
        Every rank's row count, in rank order (``[n]`` in one process).

    Raises:
        ValueError, TypeError: the first failing rank's error, on every rank.
    """
    if not gather or world_size() == 1:
        return [check()]
    try:
        n, err = check(), None
    except _ERROR_TYPES as e:
        n, err = 0, e
    dev = device if device is not None else torch.device("cpu")
    code = 0 if err is None else 1 + _ERROR_TYPES.index(type(err) if type(err) in _ERROR_TYPES else ValueError)
    head = torch.tensor([n, code], dtype=torch.long, device=dev)
    parts = [torch.zeros(2, dtype=torch.long, device=dev) for _ in range(world_size())]
    dist.all_gather(parts, head)
    codes = [int(p[1]) for p in parts]
    if any(codes):
        msg = torch.tensor(list(str(err).encode("utf-8")) if err is not None else [], dtype=torch.uint8, device=dev)
        lengths = _all_sizes(msg.numel(), dev)
        messages = _gather_padded(msg, lengths)
        first = next(i for i, c in enumerate(codes) if c)
        start = sum(lengths[:first])
        text = bytes(messages[start : start + lengths[first]].tolist()).decode("utf-8", errors="replace")
        raise _ERROR_TYPES[codes[first] - 1](f"{text} (on rank {first} of {world_size()})")
    return [int(p[0]) for p in parts]
