"""MarginMSE: distil a teacher's score margins into a bi-encoder (Hofstätter et al. 2020).

Hofstätter, Althammer, Schröder, Sertkan & Hanbury 2020, "Improving Efficient Neural Ranking Models with
Cross-Architecture Knowledge Distillation" (arXiv 2010.02666), eq. 1: for a query q, a relevant passage
p⁺ and a non-relevant p⁻, the student's margin is fitted to the teacher's by mean squared error,

    ℓ = ( (S(q, p⁺) − S(q, p⁻)) − (T(q, p⁺) − T(q, p⁻)) )²,

where S is the student's score and T the teacher's. Only the margin is matched, so the student is free
to use another scale and offset than the teacher's. With K negatives per anchor the row's loss is the
mean over its K margins (sentence-transformers' ``MarginMSELoss`` with several negatives).

Here the student's score is ``<a, c> / τ`` (``normalize=True``: the cosine over τ): τ = 1 with
``normalize=False`` is the paper's dot product. A temperature below 1 lets a cosine student, whose
scores lie in [−1, 1], match margins of a teacher on a wider scale. The loss is per anchor, with no
contrast across rows: ``gather`` is accepted for a uniform signature and changes nothing (under torchrun
the mean of the ranks' means is the global mean of equal shards).
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import all_finite, check_bool, check_embeddings, check_same_device
from contrastlab.losses._common import (
    LossModule,
    TemperatureLike,
    check_finite_loss,
    check_pair,
    l2_normalize,
    resolve_loss_options,
)
from contrastlab.losses._docs import shared_docs

__all__ = ["margin_mse", "MarginMSELoss", "student_scores", "check_teacher_scores"]


def check_teacher_scores(teacher_scores: object, n: int, k: int) -> Tensor:
    """Validate the teacher's scores of each anchor's ``1 + K`` candidates and return them.

    Args:
        teacher_scores: the teacher's scores, positive first. Shape ``(N, 1 + K)``.
        n: N, the number of anchors.
        k: K, the number of negatives per anchor.

    Raises:
        TypeError: not a floating-point tensor.
        ValueError: a shape other than ``(N, 1 + K)``, or a NaN/Inf entry.
    """
    if not isinstance(teacher_scores, Tensor):
        raise TypeError(f"teacher_scores must be a torch.Tensor, got {type(teacher_scores).__name__}")
    if not teacher_scores.is_floating_point():
        raise TypeError(f"teacher_scores must be a floating-point tensor, got dtype {teacher_scores.dtype}")
    if tuple(teacher_scores.shape) != (n, 1 + k):
        raise ValueError(
            f"teacher_scores must have shape (N, 1 + K) = ({n}, {1 + k}) (the positive's score, then the "
            f"negatives'), got {tuple(teacher_scores.shape)}"
        )
    if not all_finite(teacher_scores):
        raise ValueError("teacher_scores contains NaN or Inf entries")
    return teacher_scores


def student_scores(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    *,
    temperature: TemperatureLike,
    normalize: bool,
    reduction: str,
) -> tuple[Tensor, torch.dtype, Tensor | float]:
    """The student's scores ``<a_i, c_ij>`` of each anchor's candidates (positive first), on checked inputs.

    Args:
        anchor: Shape ``(N, D)``.
        positive: Shape ``(N, D)``.
        negatives: ``(N, K, D)``, or ``(N, D)`` for one negative per anchor.
        temperature: τ > 0.
        normalize: cosine instead of the dot product.
        reduction: ``mean``, ``sum`` or ``none`` (checked here).

    Returns:
        ``(scores, dtype, inv_t)``: the unscaled scores, shape ``(N, 1 + K)`` in the compute dtype, and 1/τ
        (a float, or a 0-d tensor for a learnable τ).

    Raises:
        TypeError, ValueError: naming the argument.
    """
    n, d = check_pair("anchor", anchor, "positive", positive)
    if isinstance(negatives, Tensor) and negatives.ndim == 2:
        negatives = negatives.unsqueeze(1)  # (N, 1, D)
    check_embeddings("negatives", negatives, ndim=3)
    if negatives.shape[0] != n or negatives.shape[2] != d:
        raise ValueError(f"negatives must have shape (N, K, D) with N = {n}, D = {d}, got {tuple(negatives.shape)}")
    check_same_device(anchor=anchor, negatives=negatives)
    dtype, inv_t = resolve_loss_options(temperature, reduction, anchor, positive, negatives, normalize=normalize)
    cands = torch.cat([positive.unsqueeze(1), negatives], dim=1).to(dtype)  # (N, 1 + K, D)
    a = anchor.to(dtype)
    if normalize:
        a, cands = l2_normalize(a), l2_normalize(cands)
    # n: anchors, c: candidates, d: embedding dimension
    return torch.einsum("nd,ncd->nc", a, cands), dtype, inv_t


@shared_docs
def margin_mse(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    teacher_scores: Tensor,
    *,
    temperature: TemperatureLike = 1.0,
    normalize: bool = False,
    reduction: str = "mean",
    gather: bool = False,
) -> Tensor:
    """MarginMSE (Hofstätter et al. 2020, arXiv 2010.02666, eq. 1), averaged over each anchor's K negatives.

    ℓ_i = (1/K) Σ_k ((S_i⁺ − S_ik) − (T_i⁺ − T_ik))², with S = <a, c>/τ the student's scores and T the
    teacher's. τ = 1 and ``normalize=False`` equal sentence-transformers' ``MarginMSELoss`` (dot product).

    Args:
        anchor: {query}
        positive: {relevant}
        negatives: {documents}
        teacher_scores: {teacher_scores}
        temperature: {temperature} It divides the student's scores.
        normalize: {normalize}
        reduction: {reductions} (per-anchor losses of shape ``(N,)``).
        gather: {gather_none}

    Returns:
        The loss: a scalar, or ``(N,)`` for ``reduction="none"``.

    Raises:
        TypeError: a non-tensor input, a non-bool flag, a non-real temperature.
        ValueError: mismatched shapes (``teacher_scores`` not ``(N, 1 + K)``), NaN/Inf inputs, τ ≤ 0, an
            unknown reduction.

    Examples:
        >>> q, p, n = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 3, 8)
        >>> margin_mse(q, p, n, torch.randn(4, 4)).shape
        torch.Size([])
    """
    check_bool("gather", gather)
    raw, dtype, inv_t = student_scores(
        anchor, positive, negatives, temperature=temperature, normalize=normalize, reduction=reduction
    )
    s = raw * inv_t  # (N, 1 + K)
    t = check_teacher_scores(teacher_scores, s.shape[0], s.shape[1] - 1).detach().to(dtype=dtype, device=s.device)
    student_margin = s[:, :1] - s[:, 1:]  # (N, K)
    teacher_margin = t[:, :1] - t[:, 1:]  # (N, K)
    per_row = (student_margin - teacher_margin).square().mean(dim=1)  # (N,)
    return check_finite_loss(cd.share(per_row, reduction, per_row.shape[0], gather=False), "margin_mse")


@shared_docs
class MarginMSELoss(LossModule):
    """:func:`margin_mse` with its hyperparameters checked at construction.

    Args:
        temperature: {temperature} It divides the student's scores.
        normalize: {normalize}
        reduction: {reductions}.
        gather: {gather_none}
    """

    def __init__(
        self, temperature: TemperatureLike = 1.0, normalize: bool = False, reduction: str = "mean", gather: bool = False
    ) -> None:
        super().__init__(temperature, normalize, reduction, gather)

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor, teacher_scores: Tensor) -> Tensor:
        """The loss of :func:`margin_mse`; shapes as there."""
        return margin_mse(anchor, positive, negatives, teacher_scores, **self.hyperparameters())
