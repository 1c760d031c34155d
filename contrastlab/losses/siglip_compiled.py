"""SigLIP's element-wise block pass compiled by PyTorch's compiler: an optional path, the eager one the reference.

Zhai et al. 2023 (arXiv 2303.15343), eq. (1); :mod:`contrastlab.losses.siglip` streams the logits
``L = Q Kᵀ + b`` in blocks of rows and, per block, makes the row sums of ``softplus(L)`` and the gradient
block ``σ(L)`` with several eager passes (an ``exp``, the sliced products of
:func:`contrastlab.losses.siglip._softplus_row_sums`, two passes for ``σ``). Here the same two results
come from one function compiled by ``torch.compile`` (Inductor: one fused C++/OpenMP loop nest on the
CPU, Triton on a GPU), with ``softplus(L) = max(L, 0) + log1p(exp(−|L|))``, exact for every finite logit
(no overflow fallback is needed).

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


def _loss_grad_block(neg: Tensor) -> tuple[Tensor, Tensor]:
    """The block's softplus row sums ``(r,)`` and ``σ(L) = 1/(1 + exp(−L))`` ``(r, M)``."""
    return _softplus_sums(neg), torch.sigmoid(-neg)


@functools.cache
def compiled_blocks() -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], tuple[Tensor, Tensor]]]:
    """``(loss_block, loss_grad_block)`` compiled with dynamic shapes (a ragged last block needs no recompile)."""
    return torch.compile(_loss_block, dynamic=True), torch.compile(_loss_grad_block, dynamic=True)
