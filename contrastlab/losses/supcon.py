"""Supervised contrastive loss, L_out of Khosla et al. 2020 (eq. 2).

For anchor i with positives P(i) = {p ≠ i : y_p = y_i} among all other samples A(i) = {a ≠ i},

    ℓ_i = −(1/|P(i)|) Σ_{p ∈ P(i)} log( exp(s_ip/τ) / Σ_{a ∈ A(i)} exp(s_ia/τ) ).

Anchors without any positive (singleton classes in the batch) are excluded from the loss; a batch in
which every anchor is a singleton raises a ``ValueError`` (the loss is undefined there).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import check_bool, check_embeddings, check_labels, check_same_device
from contrastlab.losses._common import (
    LossModule,
    TemperatureLike,
    check_finite_loss,
    device_of,
    gather_rows,
    l2_normalize,
    resolve_loss_options,
)
from contrastlab.losses._docs import shared_docs

__all__ = ["supcon", "SupConLoss"]


@shared_docs
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
        temperature: {temperature} Khosla et al. use 0.1.
        normalize: {normalize} The paper normalises.
        reduction: {reductions}. ``"mean"`` is over the anchors that have a positive; ``"none"`` gives
            shape ``(N,)``, anchors without a positive holding 0 (excluded from ``"mean"``; compare
            labels to find them).
        gather: under torch.distributed, every rank's samples (and labels) are candidates; ``"mean"``
            divides by the global number of anchors that have a positive, and the all-singleton check
            is about the global batch. {gather_share}

    Raises:
        ValueError: every anchor is a singleton, labels of the wrong length, invalid embeddings.
        TypeError: non-integer labels, non-floating embeddings.
    """
    check_bool("gather", gather)
    checked: dict[str, Any] = {}

    def check() -> int:
        check_embeddings("embeddings", embeddings, ndim=2)
        check_labels("labels", labels, embeddings.shape[0])
        check_same_device(embeddings=embeddings, labels=labels)
        checked["dtype"], checked["inv_t"] = resolve_loss_options(
            temperature, reduction, embeddings, normalize=normalize
        )
        return embeddings.shape[0]

    cd.agree(check, gather=gather, device=device_of(embeddings))
    dtype, inv_t = checked["dtype"], checked["inv_t"]
    z = embeddings.to(dtype)
    if normalize:
        z = l2_normalize(z)
    n = z.shape[0]
    z_all, offset = gather_rows(z, gather)  # (N, D): every rank's samples; (z, 0) in one process
    y_all = cd.gather_no_grad(labels) if gather else labels
    logits = (z * inv_t) @ z_all.T  # (n, N)
    self_mask = torch.zeros(n, z_all.shape[0], dtype=torch.bool, device=z.device)
    self_mask[torch.arange(n), offset + torch.arange(n)] = True  # sample i is never its own candidate
    log_prob = logits - torch.logsumexp(logits.masked_fill(self_mask, float("-inf")), dim=1, keepdim=True)
    pos_mask = (labels.unsqueeze(1) == y_all.unsqueeze(0)) & ~self_mask  # (n, N)
    n_pos = pos_mask.sum(dim=1)  # (n,)
    has_pos = n_pos > 0
    valid = int(cd.all_reduce_sum(has_pos.sum()) if gather else has_pos.sum())  # anchors with a positive
    if valid == 0:
        raise ValueError("labels: every anchor is a singleton (no two samples share a label); SupCon is undefined")
    # where() rather than multiplication: the diagonal of log_prob is finite, but keep masked terms out.
    summed = torch.where(pos_mask, log_prob, torch.zeros_like(log_prob)).sum(dim=1)
    per_anchor = -summed / n_pos.clamp_min(1).to(dtype)  # 0 for anchors without positives
    if reduction == "mean":  # over the anchors that have a positive, of every rank
        out = cd.share(per_anchor[has_pos], "mean", valid, gather=gather)
    else:
        out = cd.share(per_anchor, reduction, n, gather=gather)
    return check_finite_loss(out, "embeddings", gather=gather)


class SupConLoss(LossModule):
    """Module form of :func:`supcon`; hyperparameters are validated at construction."""

    def __init__(
        self, temperature: TemperatureLike = 0.1, normalize: bool = True, reduction: str = "mean", gather: bool = False
    ) -> None:
        super().__init__(temperature, normalize, reduction, gather)

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Compute the loss; see :func:`supcon` for shapes."""
        return supcon(embeddings, labels, **self.hyperparameters())
