"""Supervised contrastive loss, L_out of Khosla et al. 2020 (eq. 2).

For anchor i with positives P(i) = {p ≠ i : y_p = y_i} among all other samples A(i) = {a ≠ i},

    ℓ_i = −(1/|P(i)|) Σ_{p ∈ P(i)} log( exp(s_ip/τ) / Σ_{a ∈ A(i)} exp(s_ia/τ) ).

Anchors without any positive (singleton classes in the batch) are excluded from the loss; a batch in
which every anchor is a singleton raises a ``ValueError`` (the loss is undefined there).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from contrastlab._checks import (
    check_bool,
    check_choice,
    check_embeddings,
    check_labels,
    check_positive_float,
    check_same_device,
    compute_dtype,
)
from contrastlab.losses._common import (
    REDUCTIONS,
    TemperatureLike,
    check_finite_loss,
    distributed_world_size,
    l2_normalize,
    reduce,
    resolve_inverse_temperature,
)

__all__ = ["supcon", "SupConLoss"]


def supcon(
    embeddings: Tensor,
    labels: Tensor,
    *,
    temperature: TemperatureLike = 0.1,
    normalize: bool = True,
    reduction: str = "mean",
    gather: bool = False,
) -> Tensor:
    """Supervised contrastive loss L_out.

    Args:
        embeddings: all views of all samples (stack multiple views as extra rows). Shape ``(N, D)``.
        labels: integer class labels. Shape ``(N,)``.
        temperature: τ > 0 (float, 0-d tensor or ``LearnableTemperature``); Khosla et al. use 0.1.
        normalize: cosine similarity (``True``, as in the paper) or raw dot products.
        reduction: ``"mean"`` over anchors that have a positive, ``"sum"``, or ``"none"`` — then the
            result has shape ``(N,)`` and anchors without a positive hold 0 (see ``has_positive`` by
            comparing labels; they are excluded from ``"mean"``).
        gather: under torch.distributed, use every rank's samples as candidates
            (:func:`contrastlab.distributed.supcon_gathered`); a no-op in one process.

    Raises:
        ValueError: every anchor is a singleton, labels of the wrong length, invalid embeddings.
        TypeError: non-integer labels, non-floating embeddings.
    """
    if gather and distributed_world_size() > 1:
        from contrastlab.distributed import supcon_gathered

        return supcon_gathered(embeddings, labels, temperature=temperature, normalize=normalize, reduction=reduction)
    check_embeddings("embeddings", embeddings, ndim=2)
    labels = check_labels("labels", labels, embeddings.shape[0])
    check_same_device(embeddings=embeddings, labels=labels)
    check_choice("reduction", reduction, REDUCTIONS)
    check_bool("normalize", normalize)
    dtype = compute_dtype(embeddings)
    inv_t = resolve_inverse_temperature(temperature, dtype, embeddings.device)

    z = embeddings.to(dtype)
    if normalize:
        z = l2_normalize(z)
    n = z.shape[0]
    logits = (z * inv_t) @ z.T  # (N, N)
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    log_prob = logits - torch.logsumexp(logits.masked_fill(self_mask, float("-inf")), dim=1, keepdim=True)
    pos_mask = (labels.unsqueeze(0) == labels.unsqueeze(1)) & ~self_mask  # (N, N)
    n_pos = pos_mask.sum(dim=1)  # (N,)
    has_pos = n_pos > 0
    if not bool(has_pos.any()):
        raise ValueError("labels: every anchor is a singleton (no two samples share a label); SupCon is undefined")
    # where() rather than multiplication: the diagonal of log_prob is finite, but keep masked terms out.
    summed = torch.where(pos_mask, log_prob, torch.zeros_like(log_prob)).sum(dim=1)
    per_anchor = -summed / n_pos.clamp_min(1).to(dtype)  # 0 for anchors without positives
    if reduction == "mean":
        out = per_anchor[has_pos].mean()
    else:
        out = reduce(per_anchor, reduction)
    return check_finite_loss(out, "embeddings")


class SupConLoss(nn.Module):
    """Module form of :func:`supcon`; hyperparameters are validated at construction."""

    def __init__(
        self, temperature: TemperatureLike = 0.1, normalize: bool = True, reduction: str = "mean", gather: bool = False
    ) -> None:
        super().__init__()
        if not isinstance(temperature, (nn.Module, Tensor)):
            temperature = check_positive_float("temperature", temperature)
        self.temperature = temperature
        check_bool("normalize", normalize)
        self.normalize = normalize
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        check_bool("gather", gather)
        self.gather = gather

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Compute the loss; see :func:`supcon` for shapes."""
        return supcon(
            embeddings,
            labels,
            temperature=self.temperature,
            normalize=self.normalize,
            reduction=self.reduction,
            gather=self.gather,
        )
