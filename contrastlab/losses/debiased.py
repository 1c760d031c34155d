"""Debiased InfoNCE (Chuang et al. 2020) and the estimator it shares with hard-negative InfoNCE.

Chuang, Robinson, Lin, Torralba & Jegelka 2020, "Debiased Contrastive Learning" (arXiv 2007.00224),
eq. 6: the negatives drawn from the data include, with probability τ⁺ (the class prior), samples of
the anchor's own class. Their sum is replaced by an estimate of the sum over true negatives,

    g_i = max( (N/τ⁻) · ( (1/N) Σ_j e^{S_ij} − τ⁺ e^{S_i⁺} ),  N e^{−1/τ} ),    τ⁻ = 1 − τ⁺,

and ℓ_i = −log( e^{S_i⁺} / (e^{S_i⁺} + g_i) ), with S_ij = s(a_i, n_j)/τ the scaled similarities, S_i⁺
the positive's, N the number of negatives j of anchor i and one positive sample per anchor (the
paper's M = 1, as in its official code). The subtracted term τ⁺ e^{S_i⁺} removes the expected share
of same-class samples from the mean over the negatives. The floor N e^{−1/τ} is the paper's clamp at
the estimator's theoretical minimum: for unit vectors (``normalize=True``) every e^{S_ij} is at least
e^{−1/τ} (cosine ≥ −1), so the sum over N true negatives cannot be smaller; the estimate, a
difference, can (when the positive dominates the batch), and the clamp keeps it positive. With
``normalize=False`` the same floor N e^{−1/τ} is applied as a plain constant.

Robinson, Chuang, Sra & Jegelka 2021, "Contrastive Learning with Hard Negative Samples" (arXiv
2010.04592, Sec. 3, the importance-sampling estimator) draws the negatives from q_β(n) ∝ e^{β S_in}·p(n)
instead, estimated by reweighting the uniform batch: the mean (1/N) Σ_j e^{S_ij} becomes

    Σ_j e^{(1+β) S_ij} / Σ_j e^{β S_ij}

(weights e^{β S_ij}, normalised), everything else unchanged (:mod:`contrastlab.losses.hard_negative`).
With one positive the reweighted positive term e^{(1+β)S_i⁺}/e^{βS_i⁺} is e^{S_i⁺}: the same τ⁺ e^{S_i⁺}.
β = 0 is the debiased loss, and β = 0, τ⁺ = 0 is InfoNCE with the same negatives (the floor never binds
for unit vectors). Gradients flow through the weights, as in the official code.

Both need only two row reductions over the negatives, log Σ_j e^{(1+β)S_ij} and log Σ_j e^{βS_ij}
(one when β = 0): row log-sum-exps of the logit matrix scaled by (1+β) and by β, computed by the
streamed dense and the tiled kernels of :mod:`contrastlab.losses.tiled` (memory linear in N + M beyond
the dense budget) with the positive left out by the kernels' diagonal exclusion. The estimator is then
evaluated per row in log space, so no e^{S} is ever formed outside the kernels: log g_i = B_i − log τ⁻ +
log(1 − τ⁺ N e^{S_i⁺ − B_i}), B_i = log(N Σ_j e^{(1+β)S_ij} / Σ_j e^{βS_ij}) (log Σ_j e^{S_ij} for β = 0),
clamped at log N − 1/τ.

Negatives (``negatives``, as :func:`contrastlab.losses.info_nce`):
    * ``None`` — in-batch, one direction: anchor i's negatives are the other rows' positives p_j
      (j ≠ i; N − 1 of them, every rank's under ``gather``); its own positive is the left-out diagonal.
    * ``None`` with ``simclr=True`` — SimCLR's arrangement, as in both papers' code (Chen et al. 2020,
      arXiv 2002.05709): both views of each sample are anchors (2N rows), and each view's negatives are
      the other 2N − 2 views (its own and its partner's entries left out).
    * ``(M, D)`` — shared: the M negatives of every anchor (every rank's under ``gather``).
    * ``(N, K, D)`` — per anchor: K negatives of its own (local under ``gather``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import check_bool, check_real
from contrastlab.losses import tiled
from contrastlab.losses._common import (
    LossModule,
    TemperatureLike,
    check_finite_loss,
    check_inputs,
    device_of,
    gather_rows,
    scaled_pair,
)
from contrastlab.losses._docs import shared_docs

__all__ = ["debiased_info_nce", "DebiasedInfoNCELoss", "check_tau_plus", "check_beta"]


def check_tau_plus(tau_plus: object) -> float:
    """Validate the class prior τ⁺: a real number in [0, 1) (τ⁻ = 1 − τ⁺ divides the estimate)."""
    v = check_real("tau_plus", tau_plus)
    if not 0.0 <= v < 1.0:
        raise ValueError(f"tau_plus must be in [0, 1), got {v}")
    return v


def check_beta(beta: object) -> float:
    """Validate the hardness concentration β: a real number ≥ 0 (0 weighs every negative alike)."""
    v = check_real("beta", beta)
    if v < 0:
        raise ValueError(f"beta must be >= 0, got {v}")
    return v


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 − eˣ) for x < 0, accurate at both ends (Mächler 2012: expm1 near 0, log1p far below).

    Each branch sees only its own inputs (the other's replaced by −1), so neither's gradient is
    evaluated where it is infinite (0·inf would be NaN).
    """
    near = x > -math.log(2.0)
    return torch.where(
        near, torch.log(-torch.expm1(torch.where(near, x, -1.0))), torch.log1p(-torch.exp(torch.where(near, -1.0, x)))
    )


def _log_negative_term(
    lse_hard: Tensor, lse_weight: Tensor | None, pos: Tensor, n_neg: int, tau_plus: float, inv_t: Tensor | float
) -> Tensor:
    """The clamped debiased (β-reweighted) estimate log g_i of the negatives' sum, per row.

    Args:
        lse_hard: log Σ_j e^{(1+β)S_ij} over the row's negatives. Shape ``(R,)``.
        lse_weight: log Σ_j e^{βS_ij} (the importance weights' normaliser), or ``None`` for β = 0.
        pos: the positive logits S_i⁺. Shape ``(R,)``.
        n_neg: N, the number of negatives of every row.
        tau_plus: τ⁺ in [0, 1).
        inv_t: 1/τ (a float, or a 0-d tensor for a learnable temperature).
    """
    log_n = math.log(n_neg)
    # B_i = log of N·(reweighted mean): the plain sum log Σ_j e^{S_ij} when β = 0.
    b = lse_hard if lse_weight is None else lse_hard - lse_weight + log_n
    if tau_plus > 0:
        # r_i = log(τ⁺ N e^{S_i⁺} / e^{B_i}); the estimate is positive only where r_i < 0, and there
        # log g_i = B_i − log τ⁻ + log(1 − e^{r_i}). Elsewhere the clamp applies; r is kept at most −tiny
        # so that the unused branch and its gradient stay finite (log(1 − eʳ) → −inf as r → 0).
        r = (math.log(tau_plus) + log_n) + pos - b
        valid = r < 0
        b = b - math.log1p(-tau_plus) + _log1mexp(r.clamp(max=-torch.finfo(r.dtype).tiny))
        b = torch.where(valid, b, float("-inf"))
    floor = log_n - inv_t  # log(N e^{−1/τ}); carries 1/τ's gradient when τ is learnable
    return torch.maximum(b, floor if isinstance(floor, Tensor) else torch.full_like(b, floor))


def _scaled(q: Tensor, c: float) -> Tensor:
    """``c·q`` (the logits c·S), without a copy for c = 1."""
    return q if c == 1.0 else q * c


def _row_lse(q: Tensor, k: Tensor, block: int | None, offset: int) -> Tensor:
    """Row LSE of ``q kᵀ`` without the entries ``(i, offset + i)``, dense (logits kept) or tiled."""
    return tiled.row_lse(q, k, block, exclude_diagonal=True, col_offset=offset)


def debiased_estimate(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor | None,
    *,
    temperature: TemperatureLike,
    tau_plus: float,
    beta: float,
    simclr: bool,
    normalize: bool,
    reduction: str,
    chunk_size: int | None,
    gather: bool,
) -> Tensor:
    """The loss of :func:`debiased_info_nce` with the hard-negative concentration β (0: debiased).

    Shared by :func:`debiased_info_nce` (β = 0) and
    :func:`contrastlab.losses.hard_negative.hard_negative_info_nce`; arguments as theirs.
    """
    check_bool("gather", gather)
    checked: dict[str, Any] = {}

    def check() -> int:
        n_local, checked["dtype"], checked["inv_t"] = check_inputs(
            anchor, positive, negatives, temperature=temperature, reduction=reduction, normalize=normalize
        )
        check_bool("simclr", simclr)
        if simclr and negatives is not None:
            raise ValueError("simclr=True contrasts the 2N views in the batch: negatives must be None")
        checked["tau_plus"] = check_tau_plus(tau_plus)
        checked["beta"] = check_beta(beta)
        checked["chunk_size"] = tiled.check_chunk_size(chunk_size)
        return n_local

    sizes = cd.agree(check, gather=gather, device=device_of(anchor))
    n_global = sum(sizes)
    if negatives is None and n_global < 2:
        raise ValueError("anchor: in-batch negatives need N >= 2 (N = 1 has no negatives)")
    dtype, inv_t, chunk = checked["dtype"], checked["inv_t"], checked["chunk_size"]
    tp, bt = checked["tau_plus"], checked["beta"]
    scales = (1.0 + bt,) if bt == 0 else (1.0 + bt, bt)  # (1+β)S for the weighted sum, βS for its weights
    itemsize = torch.finfo(dtype).bits // 8
    budget = tiled.DENSE_MEMORY_BUDGET_BYTES // len(scales)  # one kept logit buffer per scale

    a, q, k = scaled_pair(anchor, positive, dtype, inv_t, normalize)  # q = a/(‖a‖τ), k = p/‖p‖
    pos = (q * k).sum(dim=1)  # (n,) the positive logits S_i⁺
    n = q.shape[0]
    # The estimator weights each row's sums unequally: with a backward the dense path keeps the logits.
    keep = tiled.keeps_logits("none", q, k, *(() if negatives is None else (negatives,)))

    if negatives is None and simclr:
        ka = tiled.normalize_scale(a) if normalize else a
        qb = k * inv_t
        ka_all, offset = gather_rows(ka, gather)  # (N, D) every rank's first views
        kb_all, _ = gather_rows(k, gather)  # (N, D) every rank's second views
        block = tiled.plan_chunk_size(2 * n, 2 * n_global, itemsize, chunk, budget, keeps_logits=keep)
        n_neg, pos = 2 * n_global - 2, torch.cat([pos, pos])

        def sweep(c: float) -> Tensor:
            # Each view against both halves; the left-out entries (i, offset + i) are its self and partner.
            lse = []
            for rows in (_scaled(q, c), _scaled(qb, c)):
                lse.append(
                    torch.logaddexp(_row_lse(rows, ka_all, block, offset), _row_lse(rows, kb_all, block, offset))
                )
            return torch.cat(lse)

    elif negatives is None:
        k_all, offset = gather_rows(k, gather)  # (N, D) every rank's positives; (k, 0) in one process
        block = tiled.plan_chunk_size(n, n_global, itemsize, chunk, budget, keeps_logits=keep)
        n_neg = n_global - 1

        def sweep(c: float) -> Tensor:
            return _row_lse(_scaled(q, c), k_all, block, offset)  # anchor i's own positive (offset + i) left out

    else:
        negs = negatives.to(dtype)
        if normalize:
            negs = tiled.normalize_scale(negs)
        if negs.ndim == 2:
            negs, _ = gather_rows(negs, gather)  # every rank's shared negatives: one set of Σ_r M_r rows
            block = tiled.plan_chunk_size(n, negs.shape[0], itemsize, chunk, budget, keeps_logits=keep)
        else:
            block = tiled.plan_chunk_size(n, negs.shape[1], itemsize, chunk, budget)
        n_neg = negs.shape[-2]

        def sweep(c: float) -> Tensor:
            qc = _scaled(q, c)
            return tiled.per_anchor_lse(qc, negs, block) if negs.ndim == 3 else tiled.row_lse(qc, negs, block)

    lse_hard = sweep(scales[0])
    lse_weight = sweep(scales[1]) if len(scales) == 2 else None
    log_g = _log_negative_term(lse_hard, lse_weight, pos, n_neg, tp, inv_t)
    loss = torch.logaddexp(pos, log_g) - pos  # −log(e^{S⁺} / (e^{S⁺} + g))
    rows_global = 2 * n_global if simclr else n_global
    return check_finite_loss(cd.share(loss, reduction, rows_global, gather=gather), "anchor/positive", gather=gather)


@shared_docs
def debiased_info_nce(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: TemperatureLike = 0.5,
    tau_plus: float = 0.1,
    simclr: bool = False,
    normalize: bool = True,
    reduction: str = "mean",
    chunk_size: int | None = None,
    gather: bool = False,
) -> Tensor:
    """Debiased InfoNCE (Chuang et al. 2020, arXiv 2007.00224, eq. 6) with class prior τ⁺.

    ℓ_i = −log( e^{S_i⁺} / (e^{S_i⁺} + g_i) ), g_i = max((Σ_j e^{S_ij} − τ⁺ N e^{S_i⁺}) / (1 − τ⁺), N e^{−1/τ}),
    over the N negatives j of each anchor (module docstring: the layouts, the clamp's constant).

    Args:
        anchor: {simclr_anchor}
        positive: {simclr_positive}
        negatives: {simclr_negatives}
        temperature: {temperature} The papers' code uses 0.5.
        tau_plus: {tau_plus} With τ⁺ = 0 the loss is InfoNCE with the same negatives.
        simclr: {simclr}
        normalize: {normalize}
        reduction: {reductions} (per-row losses).
        chunk_size: {chunk_size_kept}
        gather: {gather_candidates} {gather_share}

    Returns:
        {per_row_loss}

    Raises:
        TypeError: non-tensor or non-floating inputs, a non-real ``tau_plus``, non-bool flags.
        ValueError: shape mismatch, NaN/Inf, τ ≤ 0, ``tau_plus`` outside [0, 1), in-batch N < 2,
            ``simclr=True`` with negatives, unknown reduction, ``chunk_size`` < 1, an overflowing loss.

    Examples:
        >>> a, p = torch.randn(8, 16), torch.randn(8, 16)
        >>> debiased_info_nce(a, p, tau_plus=0.1).shape
        torch.Size([])
        >>> debiased_info_nce(a, p, simclr=True, reduction="none").shape
        torch.Size([16])
    """
    return debiased_estimate(
        anchor,
        positive,
        negatives,
        temperature=temperature,
        tau_plus=tau_plus,
        beta=0.0,
        simclr=simclr,
        normalize=normalize,
        reduction=reduction,
        chunk_size=chunk_size,
        gather=gather,
    )


class DebiasedInfoNCELoss(LossModule):
    """Module form of :func:`debiased_info_nce`; hyperparameters are validated at construction.

    The attribute ``beta`` (0 here) is the hard-negative concentration that
    :class:`contrastlab.losses.hard_negative.HardNegativeInfoNCELoss` sets; ``forward`` passes it on.

    Examples:
        >>> loss_fn = DebiasedInfoNCELoss(temperature=0.5, tau_plus=0.1, simclr=True)
        >>> loss_fn(torch.randn(4, 8), torch.randn(4, 8)).ndim
        0
    """

    def __init__(
        self,
        temperature: TemperatureLike = 0.5,
        tau_plus: float = 0.1,
        simclr: bool = False,
        normalize: bool = True,
        reduction: str = "mean",
        chunk_size: int | None = None,
        gather: bool = False,
    ) -> None:
        super().__init__(temperature, normalize, reduction, gather)
        self.tau_plus = check_tau_plus(tau_plus)
        self.simclr = check_bool("simclr", simclr)
        self.chunk_size = tiled.check_chunk_size(chunk_size)
        self.beta = 0.0

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor | None = None) -> Tensor:
        """Compute the loss; see :func:`debiased_info_nce` for shapes."""
        return debiased_estimate(anchor, positive, negatives, **(self.hyperparameters() | {"beta": self.beta}))
