"""InfoNCE and its decoupled variant (DCL) with in-batch, shared or per-anchor negatives.

For anchor a_i with positive p_i and candidate negatives n_ij (j = 1..K) the per-anchor loss is

    ℓ_i = −s(a_i, p_i)/τ + log( [exp(s(a_i, p_i)/τ)] + Σ_j exp(s(a_i, n_ij)/τ) )

where s is the cosine similarity (``normalize=True``) or the dot product (``normalize=False``), and
the bracketed positive term is present for ``variant="infonce"`` (van den Oord et al. 2018, CPC,
eq. 4; Whiteley 2026, eq. 1 up to its constant −log k) and absent for ``variant="dcl"`` (decoupled
contrastive learning, Yeh et al. 2022, eq. 6; Whiteley's R̃ of eq. 11).

Negatives:
    * ``None`` — in-batch: anchor i's negatives are the other rows' positives p_j (j ≠ i), so the
      logits are the N × N matrix a pᵀ/τ with positives on the diagonal (CLIP/MoCo-style).
      ``symmetric=True`` averages this with the transposed direction (positive p_i as the anchor
      against all a_j), as in CLIP.
    * ``(M, D)`` — shared: every anchor is contrasted with the same M negatives (a queue, a fresh
      batch from the data distribution).
    * ``(N, K, D)`` — per anchor: K negatives of its own (Whiteley's tuples, support-corrected
      negatives).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import all_finite, check_bool, check_choice, check_same_device
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
from contrastlab.losses.compiled_choice import check_compiled
from contrastlab.losses.masked_ratio import masked_log_ratio

__all__ = ["info_nce", "InfoNCELoss", "VARIANTS"]

VARIANTS = ("infonce", "dcl")


def _validate(negatives: Tensor | None, variant: str, symmetric: bool) -> None:
    """This rank's checks of the options that only InfoNCE / DCL take."""
    check_choice("variant", variant, VARIANTS)
    check_bool("symmetric", symmetric)
    if negatives is not None and symmetric:
        raise ValueError("symmetric=True is defined for in-batch negatives only (negatives=None)")


def _check_extras(
    positive_mask: object, weights: object, anchor: Tensor, negatives: Tensor | None, symmetric: bool
) -> None:
    """Type and mode checks of ``positive_mask`` and ``weights`` (their shapes need the global sizes)."""
    for name, value in (("positive_mask", positive_mask), ("weights", weights)):
        if value is None:
            continue
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be None or a torch.Tensor, got {type(value).__name__}")
        if symmetric or (negatives is not None and negatives.ndim == 3):
            raise ValueError(f"{name} needs in-batch or shared (M, D) negatives and symmetric=False")
        if value.ndim != 2:
            raise ValueError(f"{name} must have shape (N, M), got {tuple(value.shape)}")
        if name == "positive_mask" and value.dtype != torch.bool:
            raise TypeError(f"positive_mask must be a bool tensor, got dtype {value.dtype}")
        if name == "weights":
            if not value.is_floating_point():
                raise TypeError(f"weights must be a floating-point tensor, got dtype {value.dtype}")
            if not all_finite(value) or bool((value < 0).any()):
                raise ValueError("weights must be finite and >= 0")
        check_same_device(anchor=anchor, **{name: value})


def _check_extra_shapes(positive_mask: Tensor | None, weights: Tensor | None, n: int, m: int) -> int:
    """``positive_mask`` and ``weights`` must be ``(n, m)``: this rank's anchors × every rank's candidates.

    Raises:
        ValueError: a shape differs.
    """
    for name, value in (("positive_mask", positive_mask), ("weights", weights)):
        if value is not None and tuple(value.shape) != (n, m):
            raise ValueError(
                f"{name} must have shape ({n}, {m}) (this rank's anchors × the candidates of every rank), "
                f"got {tuple(value.shape)}"
            )
    return 0


def _extra_biases(
    positive_mask: Tensor | None,
    weights: Tensor | None,
    n: int,
    m: int,
    own: int | None,
    variant: str,
    dtype: torch.dtype,
) -> dict[str, Tensor]:
    """Row-normalised log-weights of the numerator P(i) and the denominator C(i) of the weighted loss.

    ``own`` is the column of anchor 0's own positive (in-batch: ``offset``; None with shared negatives,
    where the positive is not a column). Each bias row is shifted so that its largest entry is 0 (the
    kernels need entries ≤ 0) and the shift is returned to be added back; a row with no candidate at all
    (shared negatives only) gets a harmless dummy row and an ``*_empty`` flag.

    Raises:
        ValueError: wrong shapes, an anchor without a positive of nonzero weight, or (DCL) without a
            negative of nonzero weight.
    """
    _check_extra_shapes(positive_mask, weights, n, m)
    device = (positive_mask if positive_mask is not None else weights).device  # type: ignore[union-attr]
    log_w = torch.zeros(n, m, dtype=dtype, device=device) if weights is None else weights.detach().to(dtype).log()
    pmask = torch.zeros(n, m, dtype=torch.bool, device=device) if positive_mask is None else positive_mask.clone()
    rows = torch.arange(n, device=device)
    if own is not None:
        pmask[rows, own + rows] = True  # anchor i's own positive
    num = log_w.masked_fill(~pmask, float("-inf"))
    den = log_w if variant == "infonce" else log_w.masked_fill(pmask, float("-inf"))
    out: dict[str, Tensor] = {}
    for key, bias in (("num", num), ("den", den)):
        shift = bias.amax(dim=1)  # (n,): −inf for a row without any candidate of nonzero weight
        empty = torch.isinf(shift)
        if bool(empty.any()) and (own is not None or (key == "den" and variant == "dcl")):
            i = int(empty.nonzero()[0, 0])
            what = "positive" if key == "num" else "negative"
            name = "positive_mask" if key == "den" and positive_mask is not None else "weights"
            raise ValueError(f"{name}: anchor {i} has no {what} of nonzero weight left (positive_mask and weights)")
        shift = torch.where(empty, 0.0, shift)
        out[f"{key}_bias"] = torch.where(empty.unsqueeze(1), 0.0, bias - shift.unsqueeze(1))
        out[f"{key}_shift"], out[f"{key}_empty"] = shift, empty
    if own is not None:
        out["own_log_weight"] = log_w[rows, own + rows]
    return out


def _weighted_lse(
    q: Tensor, k: Tensor, bias: Tensor, diagonal: Tensor | None, offset: int, block: int | None, keep: bool
) -> Tensor:
    """Row LSE of ``q kᵀ + bias`` on the dense (streamed unless ``keep``) or the tiled kernel."""
    return tiled.row_lse(q, k, block, diagonal=diagonal, col_offset=offset, grad_ahead=not keep, bias=bias)


@shared_docs
def info_nce(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: TemperatureLike = 0.1,
    variant: str = "infonce",
    symmetric: bool = False,
    normalize: bool = True,
    reduction: str = "mean",
    chunk_size: int | None = None,
    gather: bool = False,
    positive_mask: Tensor | None = None,
    weights: Tensor | None = None,
    compiled: bool | str = False,
) -> Tensor:
    """InfoNCE / DCL loss of anchors against their positives and negatives.

    Args:
        anchor: {anchor}
        positive: {positive}
        negatives: {negatives}
        temperature: {temperature}
        variant: ``"infonce"`` (positive in the denominator) or ``"dcl"`` (positive left out).
        symmetric: average both directions (anchor→positive and positive→anchor); in-batch only.
        normalize: {normalize}
        reduction: {reductions} (per-anchor losses of shape ``(N,)``).
        chunk_size: ``None`` chooses automatically (:func:`contrastlab.losses.tiled.plan_chunk_size`):
            a mean or sum (or no backward) runs the dense path streamed in blocks of rows, memory
            linear in N + K, up to K = 65,536 candidates; per-row losses with a backward keep the
            N × K logits while they and their gradient fit
            :data:`contrastlab.losses.tiled.DENSE_MEMORY_BUDGET_BYTES` (1 GiB); beyond either, the
            tiled kernel. An int forces the tiled kernel with that tile side (memory
            O((N + K)·D + chunk_size²), any value ≥ 1); for a mean or sum of in-batch InfoNCE / DCL
            its tiles are full-width stripes of ``chunk_size² / N`` rows when those hold at least 64
            rows (:func:`contrastlab.losses.tiled.stripe_rows`: the same memory, one GEMM fewer). For
            that case ``None`` measures the stripe height beyond K = 16,384 (float32): the tile side
            whose stripe GEMMs run within 10% of the best measured, timed once per process
            (:mod:`contrastlab.losses.stripe_calibration`). All paths give the same numbers (to
            rounding: a measured side can differ between processes; pass an int for bit-reproducible runs).
        gather: under torch.distributed, contrast this rank's anchors with the candidates of every
            rank (in-batch positives, and shared negatives, are gathered with exact gradients; per-anchor
            negatives stay local). {gather_share} The mean over ranks of the shares is the
            single-process loss of the global batch (``"none"``: this rank's rows' losses), and every
            check about the batch (DCL's N ≥ 2) is about the global batch.
        positive_mask: optional boolean ``(N, M)`` over each anchor's candidates: True marks another
            positive of anchor i (multiple positives, or a false negative counted as one). In-batch the
            candidates are the positives of every row (of every rank under ``gather``, rank order), and
            anchor i's own positive always is one; with shared negatives ``(M, D)`` they are the M
            negatives (of every rank), ``positive[i]`` being a positive besides. The loss becomes
            ℓ_i = −log(Σ_{j∈P(i)} w_ij e^{S_ij} / Σ_{j∈C(i)} w_ij e^{S_ij}), C(i) every candidate
            (InfoNCE: the positives stay in the denominator, the "sum inside the log" of Khosla et al.
            2020, arXiv 2004.11362, eq. 3) or every candidate not in P(i) (DCL).
        weights: optional nonnegative ``(N, M)`` per-candidate weights w_ij in both sums (default 1);
            0 leaves a candidate out (a duplicate, a known false negative). No gradient flows to them.
            ``positive_mask`` and ``weights`` need in-batch or shared negatives and ``symmetric=False``;
            they go through the same dense and tiled kernels (as a log-weight added to each logit), so
            memory stays linear in N + M beyond the (N, M) arrays themselves.
        compiled: with ``positive_mask`` (in-batch, ``variant="infonce"``, no ``weights``, a mean or sum
            on the streamed path), ``True`` makes each block's element-wise pass by a function compiled
            by ``torch.compile`` (:mod:`contrastlab.losses.masked_ratio_compiled`) instead of the eager
            passes, the reference and the default (``False``); {compiled_auto} Elsewhere it changes
            nothing.

    Returns:
        The loss, a float32 scalar (float64 if any input is float64), or ``(N,)`` for
        ``reduction="none"``. Half-precision inputs are computed in float32.

    Raises:
        TypeError: non-tensor or non-floating inputs, non-bool ``symmetric``.
        ValueError: shape mismatch, empty inputs, NaN/Inf, τ ≤ 0, unknown variant/reduction, inputs
            on different devices, ``chunk_size`` < 1, or similarities that overflow with ``normalize=False``.

    Examples:
        >>> a, p = torch.randn(8, 16), torch.randn(8, 16)
        >>> info_nce(a, p, temperature=0.1).shape
        torch.Size([])
        >>> info_nce(a, p, torch.randn(8, 5, 16), variant="dcl", reduction="none").shape
        torch.Size([8])
    """
    check_bool("gather", gather)
    checked: dict[str, Any] = {}

    def check() -> int:
        n_local, checked["dtype"], checked["inv_t"] = check_inputs(
            anchor, positive, negatives, temperature=temperature, reduction=reduction, normalize=normalize
        )
        _validate(negatives, variant, symmetric)
        check_compiled(compiled)
        checked["chunk_size"] = tiled.check_chunk_size(chunk_size)
        _check_extras(positive_mask, weights, anchor, negatives, symmetric)
        return n_local

    sizes = cd.agree(check, gather=gather, device=device_of(anchor))
    n_global = sum(sizes)
    if negatives is None and variant == "dcl" and n_global < 2:
        raise ValueError("anchor: variant='dcl' with in-batch negatives needs N >= 2 (N = 1 has no negatives)")
    dtype, inv_t, chunk = checked["dtype"], checked["inv_t"], checked["chunk_size"]
    extra: dict[str, Tensor] = {}
    masked = positive_mask is not None or weights is not None  # every rank passes them alike
    if masked:
        if negatives is None:
            m_global, own = n_global, sum(sizes[: cd.rank()]) if gather else 0
        else:
            m_global = sum(cd.all_sizes(negatives.shape[0], anchor.device)) if gather else negatives.shape[0]
            own = None
        n_rows = anchor.shape[0]
        cd.agree(
            lambda: _check_extra_shapes(positive_mask, weights, n_rows, m_global), gather=gather, device=anchor.device
        )

    def make_extras() -> None:
        """The row-normalised log-weights of the two weighted sweeps (the general masked path)."""

        def check_extras() -> int:
            extra.update(_extra_biases(positive_mask, weights, anchor.shape[0], m_global, own, variant, dtype))
            return 0

        cd.agree(check_extras, gather=gather, device=anchor.device)

    if masked and negatives is not None:
        make_extras()
    itemsize = torch.finfo(dtype).bits // 8
    budget = tiled.DENSE_MEMORY_BUDGET_BYTES

    a, q, k = scaled_pair(anchor, positive, dtype, inv_t, normalize)  # q = a/(‖a‖τ), k = p/‖p‖
    pos = (q * k).sum(dim=1)  # (n,) positive logits (in-batch: entry (i, offset + i) of the logit matrix)
    n = q.shape[0]

    if negatives is None:
        exclude = variant == "dcl"  # DCL leaves anchor i's own positive (column offset + i) out
        k_all, offset = gather_rows(k, gather)  # (N, D): every rank's positives; (k, 0) in one process
        ratio: Tensor | None = None
        if masked:  # extra positives and per-candidate weights: one sweep when streamed, else two
            keep = tiled.keeps_logits(reduction, q, k)
            block = tiled.plan_chunk_size(n, k_all.shape[0], itemsize, chunk, budget, keeps_logits=keep)
            if block is None and not keep:
                ratio = masked_log_ratio(
                    q,
                    k_all,
                    positive_mask=positive_mask,
                    weights=weights,
                    dcl=exclude,
                    diagonal=pos,
                    col_offset=offset,
                    compiled=compiled,
                )
                if gather and any(cd.agree(lambda: int(ratio is None), gather=gather, device=anchor.device)):
                    ratio = None  # some rank needs the general path; every rank takes it
        if ratio is not None:
            loss = ratio
        elif masked:  # the general path: two weighted sweeps, P(i) and C(i)
            make_extras()
            den = _weighted_lse(q, k_all, extra["den_bias"], pos, offset, block, keep) + extra["den_shift"]
            if positive_mask is None:  # P(i) = {i}: the numerator is the weighted positive logit
                num = pos + extra["own_log_weight"]
            else:
                num = _weighted_lse(q, k_all, extra["num_bias"], pos, offset, block, keep) + extra["num_shift"]
            loss = den - num
        elif not symmetric:
            keep = tiled.keeps_logits(reduction, q, k)
            block = tiled.plan_chunk_size(n, k_all.shape[0], itemsize, chunk, budget, keeps_logits=keep, like=k_all)
            stripe = None if block is None or keep else tiled.stripe_rows(block, k_all.shape[0])
            # tiled, or dense: also for tiles that are full-width stripes (the dense path's blocks of rows)
            lse = tiled.row_lse(
                q,
                k_all,
                block if stripe is None else None,
                exclude_diagonal=exclude,
                diagonal=pos,
                col_offset=offset,
                grad_ahead=not keep,
                rows=stripe,
            )
            loss = lse - pos
        elif k_all.shape[0] == n:  # every row is local: both directions are the rows and columns of one matrix
            block = tiled.plan_chunk_size(n, n, itemsize, chunk, budget)
            if block is None:
                logits = q @ k.T  # (N, N): row i = anchor i against every positive; diagonal = positives
                eye = torch.eye(n, dtype=torch.bool, device=logits.device)
                # The diagonal gets the (bit-identical) positive logits, or -inf for DCL, so that the
                # loss LSE - pos is computed from one set of numbers (exactly >= 0 for InfoNCE).
                logits = torch.where(eye, float("-inf") if exclude else pos.unsqueeze(1), logits)
                # Column j = positive j as the anchor against every a_i (the transposed direction).
                loss = 0.5 * (torch.logsumexp(logits, dim=1) + torch.logsumexp(logits, dim=0)) - pos
            else:
                row_lse, col_lse = tiled.tiled_lse_rows_cols(q, k, block=block, exclude_diagonal=exclude, diagonal=pos)
                loss = 0.5 * (row_lse + col_lse) - pos
        else:  # gathered: local anchors against every positive, local positives against every anchor
            a_all, _ = gather_rows(tiled.normalize_scale(a) if normalize else a, gather)  # (N, D)
            kt = k * inv_t  # the positives as anchors, scaled by 1/τ
            keep = tiled.keeps_logits(reduction, q, k)
            block = tiled.plan_chunk_size(n, k_all.shape[0], itemsize, chunk, budget, keeps_logits=keep)
            both = [
                tiled.row_lse(
                    rows, cands, block, exclude_diagonal=exclude, diagonal=pos, col_offset=offset, grad_ahead=not keep
                )
                for rows, cands in ((q, k_all), (kt, a_all))
            ]
            loss = 0.5 * (both[0] + both[1]) - pos
    else:
        negs = negatives.to(dtype)
        if normalize:
            negs = tiled.normalize_scale(negs)
        if negs.ndim == 2 and extra:
            negs, _ = gather_rows(negs, gather)  # every rank's shared negatives: one set of Σ_r M_r rows
            block = tiled.plan_chunk_size(n, negs.shape[0], itemsize, chunk, budget)
            den_lse = _weighted_lse(q, negs, extra["den_bias"], None, 0, block, True) + extra["den_shift"]
            den_lse = torch.where(extra["den_empty"], float("-inf"), den_lse)
            den = torch.logaddexp(pos, den_lse) if variant == "infonce" else den_lse
            num = pos
            if positive_mask is not None:  # the positive and the masked negatives
                more = _weighted_lse(q, negs, extra["num_bias"], None, 0, block, True) + extra["num_shift"]
                num = torch.logaddexp(pos, torch.where(extra["num_empty"], float("-inf"), more))
            loss = den - num
            return check_finite_loss(cd.share(loss, reduction, n_global, gather=gather), "anchor", gather=gather)
        if negs.ndim == 2:
            negs, _ = gather_rows(negs, gather)  # every rank's shared negatives: one set of Σ_r M_r rows
            # InfoNCE's logaddexp with the positive weights the rows' LSE unequally ("none"); DCL does not.
            keep = tiled.keeps_logits("none" if variant == "infonce" else reduction, q, negs)
            block = tiled.plan_chunk_size(n, negs.shape[0], itemsize, chunk, budget, keeps_logits=keep)
            neg_lse = tiled.row_lse(q, negs, block, grad_ahead=not keep)  # (N,) over the (N, M) logits
        else:
            neg_lse = tiled.per_anchor_lse(q, negs, tiled.plan_chunk_size(n, negs.shape[1], itemsize, chunk, budget))
        loss = (torch.logaddexp(pos, neg_lse) if variant == "infonce" else neg_lse) - pos

    out = cd.share(loss, reduction, n_global, gather=gather)
    return check_finite_loss(out, "anchor/positive/negatives", gather=gather)


class InfoNCELoss(LossModule):
    """Module form of :func:`info_nce`; hyperparameters are validated at construction.

    Examples:
        >>> loss_fn = InfoNCELoss(temperature=0.2, variant="dcl")
        >>> loss_fn(torch.randn(4, 8), torch.randn(4, 8)).ndim
        0
    """

    def __init__(
        self,
        temperature: TemperatureLike = 0.1,
        variant: str = "infonce",
        symmetric: bool = False,
        normalize: bool = True,
        reduction: str = "mean",
        chunk_size: int | None = None,
        gather: bool = False,
    ) -> None:
        super().__init__(temperature, normalize, reduction, gather)
        self.variant = check_choice("variant", variant, VARIANTS)
        self.symmetric = check_bool("symmetric", symmetric)
        self.chunk_size = tiled.check_chunk_size(chunk_size)

    def forward(self, anchor: Tensor, positive: Tensor, negatives: Tensor | None = None) -> Tensor:
        """Compute the loss; see :func:`info_nce` for shapes."""
        return info_nce(anchor, positive, negatives, **self.hyperparameters())
