"""Listwise KL distillation: the student's softmax over a query's candidates fitted to the teacher's.

Lin, Yang & Lin 2020, "Distilling Dense Representations for Ranking using Tightly-Coupled Teachers"
(arXiv 2010.11386), eq. 2: over a query's candidate list (its positive and K negatives) the teacher's
scores T and the student's S each give a softmax at temperature τ, and the student minimises

    ℓ = τ² · KL( softmax(T/τ_T) ‖ softmax(S/τ) ) = τ² Σ_j p_j (log p_j − log q_j),

p the teacher's distribution, q the student's. The factor τ² keeps the gradient's size comparable across
temperatures (Hinton, Vinyals & Dean 2015, arXiv 1503.02531, §2). The teacher's temperature τ_T defaults
to τ; sentence-transformers' ``DistillKLDivLoss`` (dot product, ``batchmean``) is the same loss. Unlike
MarginMSE (:mod:`contrastlab.losses.margin_mse`) only the ranking information survives the softmax: the
student must match the teacher's score differences up to the scale τ. The loss is per anchor: ``gather``
is accepted for a uniform signature and changes nothing.
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import check_bool, check_positive_float
from contrastlab.losses._common import LossModule, TemperatureLike, check_finite_loss
from contrastlab.losses._docs import shared_docs
from contrastlab.losses.margin_mse import check_teacher_scores, student_scores

__all__ = ["distill_kl", "DistillKLLoss"]


@shared_docs
def distill_kl(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    teacher_scores: Tensor,
    *,
    temperature: TemperatureLike = 1.0,
    teacher_temperature: float | None = None,
    normalize: bool = False,
    reduction: str = "mean",
    gather: bool = False,
) -> Tensor:
    """Listwise KL distillation (Lin, Yang & Lin 2020, arXiv 2010.11386) over each anchor's 1 + K candidates.

    ℓ_i = τ² Σ_j p_ij (log p_ij − log q_ij), p_i = softmax(T_i/τ_T), q_i = softmax(S_i/τ), S = <a, c> the
    student's scores (cosine with ``normalize``), T the teacher's; 0·log 0 = 0.

    Args:
        anchor: {query}
        positive: {relevant}
        negatives: {documents}
        teacher_scores: {teacher_scores}
        temperature: the student's τ: {temperature} Also the teacher's unless ``teacher_temperature``.
        teacher_temperature: τ_T > 0 of the teacher's softmax (None: τ).
        normalize: {normalize}
        reduction: {reductions} (per-anchor losses of shape ``(N,)``); the mean is KL's ``batchmean``.
        gather: {gather_none}

    Returns:
        The loss: a scalar, or ``(N,)`` for ``reduction="none"``.

    Raises:
        TypeError: a non-tensor input, a non-bool flag, a non-real temperature.
        ValueError: mismatched shapes (``teacher_scores`` not ``(N, 1 + K)``), NaN/Inf inputs, a temperature
            ≤ 0, an unknown reduction.

    Examples:
        >>> q, p, n = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 3, 8)
        >>> distill_kl(q, p, n, torch.randn(4, 4), temperature=2.0).shape
        torch.Size([])
    """
    check_bool("gather", gather)
    raw, dtype, inv_t = student_scores(
        anchor, positive, negatives, temperature=temperature, normalize=normalize, reduction=reduction
    )
    s = raw * inv_t  # S/τ, (N, 1 + K)
    t = check_teacher_scores(teacher_scores, s.shape[0], s.shape[1] - 1).detach().to(dtype=dtype, device=s.device)
    inv_tt = (
        inv_t if teacher_temperature is None else 1.0 / check_positive_float("teacher_temperature", teacher_temperature)
    )
    if isinstance(inv_tt, Tensor):
        inv_tt = inv_tt.detach()  # the teacher's side carries no gradient
    log_q = torch.log_softmax(s, dim=1)  # (N, 1 + K)
    log_p = torch.log_softmax(t * inv_tt, dim=1)  # (N, 1 + K)
    p = log_p.exp()
    per_row = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p)).sum(dim=1) / (inv_t * inv_t)  # τ² · KL, (N,)
    return check_finite_loss(cd.share(per_row, reduction, per_row.shape[0], gather=False), "distill_kl")


@shared_docs
class DistillKLLoss(LossModule):
    """:func:`distill_kl` with its hyperparameters checked at construction.

    Args:
        temperature: the student's τ: {temperature}
        teacher_temperature: the teacher's τ_T > 0 (None: τ).
        normalize: {normalize}
        reduction: {reductions}.
        gather: {gather_none}
    """

    def __init__(
        self,
        temperature: TemperatureLike = 1.0,
        teacher_temperature: float | None = None,
        normalize: bool = False,
        reduction: str = "mean",
        gather: bool = False,
    ) -> None:
        super().__init__(temperature, normalize, reduction, gather)
        self.teacher_temperature = (
            None if teacher_temperature is None else check_positive_float("teacher_temperature", teacher_temperature)
        )

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor, teacher_scores: Tensor) -> Tensor:
        """The loss of :func:`distill_kl`; shapes as there."""
        return distill_kl(anchor, positive, negatives, teacher_scores, **self.hyperparameters())
