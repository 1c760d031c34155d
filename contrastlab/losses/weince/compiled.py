"""WEINCE's streamed block pass compiled by PyTorch's compiler: an optional path, the eager sweep the reference.

Erol et al. 2026 (arXiv 2606.00262), the mixed logit ``ℓ_ij = a_i s_ij + λ_i β_i (−log(1 − s_ij))``;
:mod:`contrastlab.losses.weince.stream` computes each block of anchors against every candidate with
about nine eager passes over a candidates × anchors block. Here the block is laid out anchors ×
candidates (rows: anchors), holding the shortfalls ``u = 1 − s`` (made by the GEMM), and two functions
compiled by ``torch.compile`` do the element-wise work, each one loop over the rows (Inductor; the
per-anchor coefficients are ``(b, 1)`` columns):

* :func:`_block_sums`: per anchor, ``Σ_j p̃_ij`` and ``Σ_j p̃_ij u_ij`` with
  ``p̃_ij = exp((a_c − b·log v_ij) − a·u_ij)``, ``v = clamp(u, u_min, 2)`` (the self entry excluded):
  the softmax denominator and the τ factor's sum; the block is read once, nothing is written;
* :func:`_gradient_block_`: overwrites the block by ``p̃ ∘ (a + b·[u > u_min]/u) · w`` (``w`` the
  anchor's upstream gradient over its denominator), the gradient block without the positives'
  one-hot term, read once and written once.

Each entry's exponential and logarithm are computed twice (once per function) instead of being kept in a
second block. The clamp is applied in both modes of the eager sweep: where it is off no shortfall lies
below ``u_min`` but the self entry's, which is excluded anyway, so the numbers agree to rounding.
The compiled path is taken only when asked for (``weince(..., compiled=True)``); the first call of
each dtype compiles; the functions are built on first use and cached for the process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

__all__: list[str] = []


def _exponentials(u: Tensor, a_c: Tensor, b: Tensor, a: Tensor, self_col: Tensor, u_min: Tensor) -> Tensor:
    """``p̃`` ``(r, C)`` of the shortfalls ``u`` with the self entries (column ``self_col`` of each row) zero."""
    is_self = torch.arange(u.shape[1], device=u.device) == self_col  # (r, C)
    v = torch.where(is_self, 1.0, torch.clamp(u, min=u_min).clamp(max=2.0))
    return torch.where(is_self, 0.0, torch.exp((a_c - b * torch.log(v)) - a * u))


def _block_sums(u: Tensor, a_c: Tensor, b: Tensor, a: Tensor, self_col: Tensor, u_min: Tensor) -> tuple[Tensor, Tensor]:
    """Per row ``(Σ_j p̃_ij, Σ_j p̃_ij u_ij)``, each ``(r, 1)``."""
    p = _exponentials(u, a_c, b, a, self_col, u_min)
    return p.sum(dim=1, keepdim=True), (p * u).sum(dim=1, keepdim=True)


def _gradient_block_(u: Tensor, a_c: Tensor, b: Tensor, a: Tensor, self_col: Tensor, u_min: Tensor, w: Tensor) -> None:
    """Overwrite ``u`` ``(r, C)`` by ``p̃ ∘ (a·w + b·w·[u > u_min]/u)`` (``w`` ``(r, 1)``)."""
    p = _exponentials(u, a_c, b, a, self_col, u_min)
    inv = torch.where(u > u_min, torch.reciprocal(u), 0.0)
    u.copy_(p * (a * w + b * w * inv))


@functools.cache
def compiled_weince_block() -> tuple[Callable[..., tuple[Tensor, Tensor]], Callable[..., None]]:
    """``(block_sums, gradient_block_)`` compiled with dynamic shapes (a ragged last block needs no recompile)."""
    return torch.compile(_block_sums, dynamic=True), torch.compile(_gradient_block_, dynamic=True)
