"""Support-corrected InfoNCE (Zaliaduonis et al. 2026, eqs. 7–8) and its augmentation proxy.

When positives are confined to a slice K(z) (the diversity condition fails), standard InfoNCE with
negatives from the whole space is minimised by non-orthogonal maps (Thm. 4.5). The support-corrected
loss draws the negatives of anchor z from the *same* support K(z):

    ℓ_adapt(z) = −log e^{h(z)ᵀh(z̃)/τ} / (e^{h(z)ᵀh(z̃)/τ} + Σ_{j=1}^M e^{h(z)ᵀh(z_j⁻)/τ}),  z_j⁻ ~ U(K(z)),

so the contrast normalises the model conditional q^K_{h,z} over K(z) (eq. 7) and every orthogonal h is
a minimiser (Thm. 4.6); lim_M (L − log M) = E H(P^K, Q^K) − E log|K(z)| (Thm. A.4).

The loss itself is :func:`contrastlab.losses.info_nce` with per-anchor negatives of shape ``(N, M, D)``;
this module adds the negative builders:

* exact: negatives uniform on K(z) in latent space (:func:`latent_support_negatives`, ``mode="uniform"``),
  which needs the latent — available in synthetic worlds only;
* practical proxy (the paper's Alg. 14): negatives are further independent augmentations of the same
  anchor (``mode="augment"`` in latent worlds, :func:`augmentation_negatives` for any augmentation
  callable). Memory is O(N (M + 1)) encoded views; the paper calls it "a theoretical diagnostic, not a
  scalable replacement".

References:
    J. Zaliaduonis et al., "The Loss Is Not Enough", ICML 2026, arXiv 2606.04280, §4.3, eqs. 7–8,
    Thms. 4.6 and A.4, Alg. 14.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import check_choice, check_embeddings, check_int
from contrastlab.losses._common import LossModule, TemperatureLike, device_of
from contrastlab.losses._docs import shared_docs
from contrastlab.losses.info_nce import VARIANTS, info_nce
from contrastlab.worlds.restricted import Concentration, sample_restricted_positive, sample_uniform_slice

__all__ = [
    "SupportCorrectedInfoNCELoss",
    "augmentation_negatives",
    "encode_per_anchor",
    "latent_support_negatives",
    "support_corrected_info_nce",
]


@shared_docs
def support_corrected_info_nce(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    *,
    temperature: TemperatureLike = 0.1,
    variant: str = "infonce",
    normalize: bool = True,
    reduction: str = "mean",
    gather: bool = False,
) -> Tensor:
    """Support-corrected InfoNCE (eq. 8): InfoNCE whose negatives of anchor i come from K(z_i).

    The caller supplies the per-anchor negatives' embeddings, e.g. from :func:`latent_support_negatives`
    (exact) or :func:`augmentation_negatives` (proxy) followed by :func:`encode_per_anchor`.

    Args:
        anchor: embeddings h(z_i). Shape ``(N, D)``.
        positive: embeddings h(z̃_i) of the positives. Shape ``(N, D)``.
        negatives: embeddings of the support negatives of each anchor. Shape ``(N, M, D)``.
        temperature: {temperature}
        variant: "infonce" (positive in the denominator, eq. 8) or "dcl".
        normalize: {normalize} The paper's h maps to the sphere.
        reduction: {reductions} (per-anchor losses of shape ``(N,)``).
        gather: under torch.distributed, this rank's share of the loss over every rank's anchors (the
            per-anchor negatives involve no other rank), as :func:`info_nce` with ``gather=True``.

    Returns:
        The loss (scalar, or ``(N,)`` for ``reduction="none"``).

    Raises:
        ValueError: ``negatives`` is not per-anchor ``(N, M, D)``, or any :func:`info_nce` error.
    """

    def check() -> int:
        return check_embeddings("negatives", negatives, ndim=3).shape[0]

    cd.agree(check, gather=gather, device=device_of(anchor))  # every rank raises, or none
    return info_nce(
        anchor,
        positive,
        negatives,
        temperature=temperature,
        variant=variant,
        normalize=normalize,
        reduction=reduction,
        gather=gather,
    )


class SupportCorrectedInfoNCELoss(LossModule):
    """Module form of :func:`support_corrected_info_nce` (hyperparameters validated at construction)."""

    def __init__(
        self,
        temperature: TemperatureLike = 0.1,
        variant: str = "infonce",
        normalize: bool = True,
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature, normalize, reduction)
        self.variant = check_choice("variant", variant, VARIANTS)

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor) -> Tensor:
        """Compute the loss; shapes as in :func:`support_corrected_info_nce`."""
        return support_corrected_info_nce(anchor, positive, negatives, **self.hyperparameters())


def latent_support_negatives(
    z: Tensor,
    n_negatives: int,
    d_fixed: int,
    *,
    mode: Literal["uniform", "augment"] = "uniform",
    kappa: float = 0.0,
    concentration: Concentration = "code",
    generator: torch.Generator | None = None,
) -> Tensor:
    """Latent negatives on the support K(z) of each anchor's positives.

    Args:
        z: anchors on S^{d−1}. Shape ``(N, d)``.
        n_negatives: M.
        d_fixed: m, the number of fixed leading coordinates (K(z) = {ũ = u}).
        mode: "uniform" — z_j⁻ ~ U(K(z)) (eqs. 7–8, exact); "augment" — z_j⁻ ~ P^K(·|z), further
            independent restricted-vMF augmentations of the anchor (the practical proxy, Alg. 14).
        kappa: κ of the augmentations (``mode="augment"`` only).
        concentration: "code", "eq6" or "kappa" (``mode="augment"`` only; see
            :func:`contrastlab.worlds.restricted.sample_restricted_positive`).
        generator: source of randomness.

    Returns:
        Tensor ``(N, M, d)`` in ``z``'s dtype, each row on K(z_i).
    """
    check_choice("mode", mode, ("uniform", "augment"))
    if mode == "uniform":
        return sample_uniform_slice(z, n_negatives, d_fixed, generator=generator)
    check_int("n_negatives", n_negatives, 0)
    n, d = z.shape
    rep = z.unsqueeze(1).expand(n, n_negatives, d).reshape(n * n_negatives, d)
    out = sample_restricted_positive(rep, kappa, d_fixed, concentration=concentration, generator=generator)
    return out.reshape(n, n_negatives, d)


def augmentation_negatives(augment: Callable[[Tensor], Tensor], x: Tensor, n_negatives: int) -> Tensor:
    """M further independent augmentations of every anchor (the proxy negatives of Alg. 14).

    ``augment`` is called once on the anchors repeated M times (so it must draw each row's augmentation
    independently, as batched augmentations do).

    Args:
        augment: maps a batch ``(B, *S)`` to augmented views ``(B, *S')``.
        x: anchors (observations). Shape ``(N, *S)``.
        n_negatives: M >= 1.

    Returns:
        Tensor ``(N, M, *S')``.
    """
    if not isinstance(x, Tensor) or x.ndim < 1:
        raise TypeError(f"x must be a torch.Tensor with a batch dimension, got {type(x).__name__}")
    check_int("n_negatives", n_negatives, 1)
    n = x.shape[0]
    rep = x.unsqueeze(1).expand(n, n_negatives, *x.shape[1:]).reshape(n * n_negatives, *x.shape[1:])
    views = augment(rep)
    return views.reshape(n, n_negatives, *views.shape[1:])


def encode_per_anchor(encoder: Callable[[Tensor], Tensor], views: Tensor) -> Tensor:
    """Encode per-anchor views ``(N, M, *S)`` in one batch and return ``(N, M, D)``."""
    if not isinstance(views, Tensor) or views.ndim < 3:
        raise ValueError(f"views must be a tensor of shape (N, M, *S), got {getattr(views, 'shape', views)!r}")
    n, m = views.shape[:2]
    out = encoder(views.reshape(n * m, *views.shape[2:]))
    return out.reshape(n, m, *out.shape[1:])
