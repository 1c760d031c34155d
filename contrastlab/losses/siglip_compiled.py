"""SigLIP's element-wise block pass compiled by PyTorch's compiler: an optional path, the eager one the reference.

Zhai et al. 2023 (arXiv 2303.15343), eq. (1); :mod:`contrastlab.losses.siglip` streams the logits
``L = Q Kᵀ + b`` in blocks of rows and, per block, makes the row sums of ``softplus(L)``, the gradient
block ``σ(L)`` and ``∂b = Σ σ(L) − I`` with several eager passes (an ``exp``, the sliced products of
:func:`contrastlab.losses.siglip._softplus_row_sums`, two passes for ``σ``, one sum). Here one function
compiled by ``torch.compile`` makes them all, from the negated logits ``−L`` in the block buffer, with
``softplus(L) = max(L, 0) + log1p(z)`` and ``σ(L) = [L ≥ 0 ? 1 : z] / (1 + z)``, ``z = exp(−|L|)``:
exact for every finite logit (no overflow fallback is needed). Inductor emits it as two loops over the
block: one reads it and accumulates both row sums (softplus and σ, sharing ``z``); one overwrites it
with ``σ(L)`` in place. No block-sized temporary is allocated (a ``σ`` that is both summed and stored
is emitted with one, so the stored ``σ`` is written as ``sigmoid(L)``, a separate expression).

The compiled path is taken only when asked for (``siglip(..., compiled=True)``): the first call of each
dtype compiles (seconds to minutes, paid by that call), so no call pays a compile its caller did not
request. The compiled functions are built on first use and cached for the process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

__all__: list[str] = []


def _softplus_sums(neg: Tensor) -> Tensor:
    """``Σ_j softplus(L_ij)`` per row from the negated logits ``neg = −L`` ``(r, M)``, stably."""
    return (torch.clamp(-neg, min=0.0) + torch.log1p(torch.exp(-torch.abs(neg)))).sum(dim=1)


def _loss_block(neg: Tensor) -> Tensor:
    """The block's softplus row sums ``(r,)`` (a forward without gradient)."""
    return _softplus_sums(neg)


def _loss_grad_block_(neg: Tensor) -> tuple[Tensor, Tensor]:
    """The softplus and ``σ(L)`` row sums ``(r,)`` of ``neg = −L`` ``(r, M)``, which is overwritten by ``σ(L)``."""
    z = torch.exp(-torch.abs(neg))  # e^{−|L|} ∈ (0, 1]
    softplus = (torch.clamp(-neg, min=0.0) + torch.log1p(z)).sum(dim=1)
    sigma = (torch.where(neg <= 0, 1.0, z) / (1.0 + z)).sum(dim=1)
    neg.copy_(torch.sigmoid(-neg))
    return softplus, sigma


@functools.cache
def compiled_blocks() -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], tuple[Tensor, Tensor]]]:
    """``(loss_block, loss_grad_block_)`` compiled with dynamic shapes (a ragged last block needs no recompile)."""
    return torch.compile(_loss_block, dynamic=True), torch.compile(_loss_grad_block_, dynamic=True)
