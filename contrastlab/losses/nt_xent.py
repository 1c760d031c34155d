"""NT-Xent, SimCLR's normalised temperature-scaled cross-entropy over 2N views.

Chen et al. 2020, "A Simple Framework for Contrastive Learning of Visual Representations",
Algorithm 1 and eq. 1: the two views of N samples form 2N embeddings; each one's positive is its
partner view and its negatives are the other 2N − 2 embeddings. The loss is the mean over all 2N
views of

    ℓ_i = −s_{i,i⁺}/τ + log Σ_{j ≠ i} exp(s_ij/τ),

with s the cosine similarity. It equals pytorch-metric-learning's ``NTXentLoss`` on the
concatenated views with labels ``[0..N−1, 0..N−1]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import check_bool
from contrastlab.losses import tiled
from contrastlab.losses._common import (
    LossModule,
    TemperatureLike,
    check_finite_loss,
    check_inputs,
    device_of,
    gather_rows,
    l2_normalize,
)
from contrastlab.losses._docs import shared_docs

__all__ = ["nt_xent", "NTXentLoss"]


@shared_docs
def nt_xent(
    z_a: Tensor,
    z_b: Tensor,
    *,
    temperature: TemperatureLike = 0.5,
    normalize: bool = True,
    reduction: str = "mean",
    chunk_size: int | None = None,
    gather: bool = False,
) -> Tensor:
    """SimCLR's NT-Xent loss.

    Args:
        z_a: {z_a}
        z_b: {z_b}
        temperature: {temperature} SimCLR uses 0.5.
        normalize: {normalize} SimCLR normalises.
        reduction: {reductions}: the mean over the 2N views, or their losses, shape ``(2N,)`` with the
            views of ``z_a`` first.
        chunk_size: ``None`` chooses the path as :func:`contrastlab.losses.info_nce` does (dense,
            streamed in blocks of rows for a mean or sum; the 2N × 2N logits kept for ``"none"`` while
            they fit :data:`contrastlab.losses.tiled.DENSE_MEMORY_BUDGET_BYTES`; tiled beyond);
            {tiled_int}.
        gather: under torch.distributed, every rank's views are candidates: the global arrangement is
            ``[Z_a (N rows, rank order); Z_b (N rows)]``, local view-a row i sits at ``offset + i`` and
            its partner at ``N + offset + i``. {gather_share} ``"none"`` gives this rank's ``(2n,)``
            losses, view-a rows first.

    Returns:
        The loss (float32, or float64 for float64 inputs).

    Raises:
        TypeError, ValueError: invalid inputs, named in the message.

    Examples:
        >>> z = torch.randn(4, 8)
        >>> round(float(nt_xent(z, z, temperature=1e6)), 4)  # uniform logits: log(2N - 1)
        1.9459
    """
    check_bool("gather", gather)
    checked: dict[str, Any] = {}

    def check() -> int:
        n_local, checked["dtype"], checked["inv_t"] = check_inputs(
            z_a, z_b, temperature=temperature, reduction=reduction, normalize=normalize, names=("z_a", "z_b")
        )
        checked["chunk_size"] = tiled.check_chunk_size(chunk_size)
        return n_local

    n_global = sum(cd.agree(check, gather=gather, device=device_of(z_a)))
    dtype, inv_t = checked["dtype"], checked["inv_t"]
    za, zb = z_a.to(dtype), z_b.to(dtype)
    if normalize:
        za, zb = l2_normalize(za), l2_normalize(zb)
    n = za.shape[0]
    za_all, offset = gather_rows(za, gather)  # (N, D) every rank's views a; (za, 0) in one process
    zb_all, _ = gather_rows(zb, gather)
    cand = torch.cat([za_all, zb_all])  # (2N, D): views a, then views b
    qa, qb = za * inv_t, zb * inv_t
    pos = (qa * zb).sum(dim=1)  # (n,): the positive logit of both views of sample i
    itemsize = torch.finfo(dtype).bits // 8
    keep = tiled.keeps_logits(reduction, za, zb)
    block = tiled.plan_chunk_size(
        2 * n, 2 * n_global, itemsize, checked["chunk_size"], tiled.DENSE_MEMORY_BUDGET_BYTES, keeps_logits=keep
    )
    # Local views against the 2N candidates; a view is never its own candidate: view a's self column is
    # offset + i, view b's N + offset + i. When every view is local (one process) those are the diagonal
    # of one 2N × 2N matrix: a single sweep.
    if n == n_global:
        row_sets = [(torch.cat([qa, qb]), 0)]
    else:
        row_sets = [(qa, offset), (qb, n_global + offset)]
    lse = [
        tiled.row_lse(rows, cand, block, exclude_diagonal=True, col_offset=self_col, grad_ahead=not keep)
        for rows, self_col in row_sets
    ]
    loss = torch.cat(lse) - torch.cat([pos, pos])
    return check_finite_loss(cd.share(loss, reduction, 2 * n_global, gather=gather), "z_a/z_b", gather=gather)


class NTXentLoss(LossModule):
    """Module form of :func:`nt_xent`; hyperparameters are validated at construction."""

    def __init__(
        self,
        temperature: TemperatureLike = 0.5,
        normalize: bool = True,
        reduction: str = "mean",
        chunk_size: int | None = None,
        gather: bool = False,
    ) -> None:
        super().__init__(temperature, normalize, reduction, gather)
        self.chunk_size = tiled.check_chunk_size(chunk_size)

    def forward(self, z_a: Tensor, z_b: Tensor) -> Tensor:
        """Compute the loss; see :func:`nt_xent` for shapes."""
        return nt_xent(z_a, z_b, **self.hyperparameters())
