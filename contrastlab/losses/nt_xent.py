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

import torch
from torch import Tensor, nn

from contrastlab._checks import (
    check_bool,
    check_choice,
    check_embeddings,
    check_positive_float,
    check_same_device,
    compute_dtype,
)
from contrastlab.losses import tiled
from contrastlab.losses._common import (
    REDUCTIONS,
    TemperatureLike,
    check_finite_loss,
    distributed_world_size,
    l2_normalize,
    reduce,
    resolve_inverse_temperature,
)

__all__ = ["nt_xent", "NTXentLoss", "nt_xent_logits"]


def nt_xent_logits(z_a: Tensor, z_b: Tensor, inv_t: Tensor | float, *, normalize: bool = True) -> tuple[Tensor, Tensor]:
    """The (2N, 2N) scaled similarity matrix with −inf on the diagonal, and each row's positive index.

    Row i < N is view a of sample i; row N + i is view b of sample i. Inputs are assumed validated
    and in the compute dtype.

    Returns:
        ``(logits, pos_index)`` of shapes ``(2N, 2N)`` and ``(2N,)``.
    """
    n = z_a.shape[0]
    z = torch.cat([z_a, z_b], dim=0)  # (2N, D)
    if normalize:
        z = l2_normalize(z)
    logits = (z * inv_t) @ z.T  # (2N, 2N)
    eye = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(eye, float("-inf"))  # a view is never its own candidate
    pos_index = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return logits, pos_index


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
        z_a: first view's embeddings. Shape ``(N, D)``.
        z_b: second view's embeddings, row i the partner of ``z_a[i]``. Shape ``(N, D)``.
        temperature: τ > 0 (float, 0-d tensor or ``LearnableTemperature``); SimCLR uses 0.5.
        normalize: cosine similarity (``True``, SimCLR) or raw dot products.
        reduction: ``"mean"`` (over the 2N views), ``"sum"`` or ``"none"`` (shape ``(2N,)``, views of
            ``z_a`` first).
        chunk_size: ``None`` chooses the path as :func:`contrastlab.losses.info_nce` does (dense,
            streamed in blocks of rows for a mean or sum; the 2N × 2N logits kept for ``"none"`` while
            they fit :data:`contrastlab.losses.tiled.DENSE_MEMORY_BUDGET_BYTES`; tiled beyond); an int
            forces the tiled kernel with that tile side.
        gather: under torch.distributed, use every rank's views as candidates
            (:func:`contrastlab.distributed.nt_xent_gathered`, this rank's share of the global loss);
            a no-op in one process.

    Returns:
        The loss (float32, or float64 for float64 inputs).

    Raises:
        TypeError, ValueError: invalid inputs, named in the message.

    Examples:
        >>> z = torch.randn(4, 8)
        >>> round(float(nt_xent(z, z, temperature=1e6)), 4)  # uniform logits: log(2N - 1)
        1.9459
    """
    if gather and distributed_world_size() > 1:
        from contrastlab.distributed import nt_xent_gathered

        return nt_xent_gathered(
            z_a, z_b, temperature=temperature, normalize=normalize, reduction=reduction, chunk_size=chunk_size
        )
    check_embeddings("z_a", z_a, ndim=2)
    check_embeddings("z_b", z_b, ndim=2)
    if z_b.shape != z_a.shape:
        raise ValueError(f"z_b must have the same shape as z_a {tuple(z_a.shape)}, got {tuple(z_b.shape)}")
    check_same_device(z_a=z_a, z_b=z_b)
    check_choice("reduction", reduction, REDUCTIONS)
    check_bool("normalize", normalize)
    chunk_size = tiled.check_chunk_size(chunk_size)
    dtype = compute_dtype(z_a, z_b)
    inv_t = resolve_inverse_temperature(temperature, dtype, z_a.device)
    n = z_a.shape[0]
    k = torch.cat([z_a.to(dtype), z_b.to(dtype)], dim=0)  # (2N, D): views a, then views b
    if normalize:
        k = l2_normalize(k)
    q = k * inv_t
    pos = (q * k.roll(n, dims=0)).sum(dim=1)  # row i's partner view is row (i + N) mod 2N
    itemsize = torch.finfo(dtype).bits // 8
    keep = tiled.keeps_logits(reduction, q, k)
    block = tiled.plan_chunk_size(
        2 * n, 2 * n, itemsize, chunk_size, tiled.DENSE_MEMORY_BUDGET_BYTES, keeps_logits=keep
    )
    if block is None:
        lse = tiled.dense_row_lse(q, k, exclude_diagonal=True, grad_ahead=not keep)  # never a view's own self
    else:
        lse = tiled.tiled_lse(q, k, block=block, exclude_diagonal=True)
    loss = lse - pos
    return check_finite_loss(reduce(loss, reduction), "z_a/z_b")


class NTXentLoss(nn.Module):
    """Module form of :func:`nt_xent`; hyperparameters are validated at construction."""

    def __init__(
        self,
        temperature: TemperatureLike = 0.5,
        normalize: bool = True,
        reduction: str = "mean",
        chunk_size: int | None = None,
        gather: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(temperature, (nn.Module, Tensor)):
            temperature = check_positive_float("temperature", temperature)
        self.temperature = temperature
        check_bool("normalize", normalize)
        self.normalize = normalize
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        self.chunk_size = tiled.check_chunk_size(chunk_size)
        check_bool("gather", gather)
        self.gather = gather

    def forward(self, z_a: Tensor, z_b: Tensor) -> Tensor:
        """Compute the loss; see :func:`nt_xent` for shapes."""
        return nt_xent(
            z_a,
            z_b,
            temperature=self.temperature,
            normalize=self.normalize,
            reduction=self.reduction,
            chunk_size=self.chunk_size,
            gather=self.gather,
        )
