"""Hard-negative InfoNCE: the debiased loss with negatives reweighted towards the anchor (Robinson et al. 2021).

Robinson, Chuang, Sra & Jegelka 2021, "Contrastive Learning with Hard Negative Samples" (arXiv
2010.04592, Sec. 3): negatives are drawn from q_β(n) ∝ e^{β S_in}·p(n), which favours negatives the
anchor finds similar (hard ones) more the larger the concentration β ≥ 0, and the debiasing of Chuang
et al. 2020 (arXiv 2007.00224, eq. 6) is applied under q_β. In a batch of uniformly drawn negatives,
importance sampling turns the mean of e^{S_ij} into Σ_j e^{(1+β)S_ij} / Σ_j e^{βS_ij}, so that

    g_i = max( (N/τ⁻) · ( Σ_j e^{(1+β)S_ij} / Σ_j e^{βS_ij} − τ⁺ e^{S_i⁺} ),  N e^{−1/τ} ),
    ℓ_i = −log( e^{S_i⁺} / (e^{S_i⁺} + g_i) ).

β = 0 is :func:`contrastlab.losses.debiased.debiased_info_nce` (same code, same numbers) and β = 0,
τ⁺ = 0 is InfoNCE with the same negatives. The computation — two row log-sum-exps over the negatives
through the streamed / tiled kernels, the estimator in log space, the layouts and the clamp — is
:func:`contrastlab.losses.debiased.debiased_estimate`'s, documented in :mod:`contrastlab.losses.debiased`.
"""

from __future__ import annotations

from torch import Tensor

from contrastlab.losses._common import TemperatureLike
from contrastlab.losses._docs import shared_docs
from contrastlab.losses.debiased import DebiasedInfoNCELoss, check_beta, debiased_estimate

__all__ = ["hard_negative_info_nce", "HardNegativeInfoNCELoss"]


@shared_docs
def hard_negative_info_nce(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: TemperatureLike = 0.5,
    tau_plus: float = 0.1,
    beta: float = 1.0,
    simclr: bool = False,
    normalize: bool = True,
    reduction: str = "mean",
    chunk_size: int | None = None,
    gather: bool = False,
) -> Tensor:
    """Hard-negative-weighted debiased InfoNCE (Robinson et al. 2021, arXiv 2010.04592) with β and τ⁺.

    Args:
        anchor: {simclr_anchor}
        positive: {simclr_positive}
        negatives: {simclr_negatives}
        temperature: {temperature} The paper's code uses 0.5.
        tau_plus: {tau_plus}
        beta: β ≥ 0, the concentration of the negatives' weights e^{βS_ij} (0: every negative alike,
            the debiased loss; the paper's image code defaults to 1.0). β > 0 takes two sweeps over the
            negatives, each with its own kept logits.
        simclr: {simclr}
        normalize: {normalize}
        reduction: {reductions} (per-row losses).
        chunk_size: {chunk_size_kept}
        gather: {gather_candidates} {gather_share}

    Returns:
        {per_row_loss}

    Raises:
        TypeError: non-tensor or non-floating inputs, a non-real ``tau_plus`` or ``beta``, non-bool flags.
        ValueError: shape mismatch, NaN/Inf, τ ≤ 0, ``tau_plus`` outside [0, 1), ``beta`` < 0, in-batch
            N < 2, ``simclr=True`` with negatives, unknown reduction, ``chunk_size`` < 1, an overflowing loss.

    Examples:
        >>> a, p = torch.randn(8, 16), torch.randn(8, 16)
        >>> hard_negative_info_nce(a, p, tau_plus=0.1, beta=0.5).shape
        torch.Size([])
        >>> hard_negative_info_nce(a, p, torch.randn(8, 5, 16), beta=1.0, reduction="none").shape
        torch.Size([8])
    """
    return debiased_estimate(
        anchor,
        positive,
        negatives,
        temperature=temperature,
        tau_plus=tau_plus,
        beta=beta,
        simclr=simclr,
        normalize=normalize,
        reduction=reduction,
        chunk_size=chunk_size,
        gather=gather,
    )


class HardNegativeInfoNCELoss(DebiasedInfoNCELoss):
    """Module form of :func:`hard_negative_info_nce`: :class:`DebiasedInfoNCELoss` with a concentration β.

    Hyperparameters are validated at construction.

    Examples:
        >>> loss_fn = HardNegativeInfoNCELoss(temperature=0.5, tau_plus=0.1, beta=1.0)
        >>> loss_fn(torch.randn(4, 8), torch.randn(4, 8)).ndim
        0
    """

    def __init__(
        self,
        temperature: TemperatureLike = 0.5,
        tau_plus: float = 0.1,
        beta: float = 1.0,
        simclr: bool = False,
        normalize: bool = True,
        reduction: str = "mean",
        chunk_size: int | None = None,
        gather: bool = False,
    ) -> None:
        super().__init__(temperature, tau_plus, simclr, normalize, reduction, chunk_size, gather)
        self.beta = check_beta(beta)
