"""WEINCE: InfoNCE with an anchor-wise extreme-value (Weibit) correction.

Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value Corrections for
InfoNCE", ICML 2026 (arXiv 2606.00262); official code github.com/hsme98/weince (commit 49485f3),
``simclr/modules/nt_xent_hard_select.py``, ``policy="tlambda_select"``.

Cosine similarities are bounded by 1, so the largest negative similarities of an anchor lie in the
reverse-Weibull domain of attraction, where a softmax (Gumbel random-utility) model mis-describes the
top. WEINCE blends the softmax logit with the "endpoint shortfall" logit −log(1 − s) per anchor i:

    ℓ_ij = (1 − λ_i)·s_ij/τ + λ_i·(−β_i·log(1 − s_ij)),                              (README formula)
    L    = −(1/2N) Σ_i log( exp ℓ_{i,i⁺} / Σ_{j ≠ i} exp ℓ_ij )

over SimCLR's 2N views (each view's positive is its partner, its negatives the other 2N − 2 views).
λ_i and β_i are stop-gradient batch statistics (no gradient flows through them), computed per anchor
from its K negatives (the paper's §2.3, exactly as the official code does):

1. k_tail = clip(max(min_tail, round(tail_frac·K)), 10, K); take the k_tail largest negative cosines
   (sorted descending), shortfalls δ = max(1 − s, eps), x = log δ.
2. F̂_k = k/(k_tail + 1); drop the first burn = max(1, k_tail // 20) points. Weibull fit: per-anchor OLS
   of y_W = log F̂ on x (slope β̂_i, clamped ≥ 0; R²_W). Gumbel proxy: OLS of y_G = log(−log F̂) on x.
   A wrong-sign slope (β̂ ≤ 0, Gumbel slope ≥ 0) adds 1e6 to that fit's SSE. AIC = n·log(SSE/n) + 4 and
   ΔAIC_i = AIC_G − AIC_W (> 0 favours Weibull).
3. Cap proximity ρ_i = max(1 − max_j s_ij⁻, eps); pivot ρ_0 = the order statistic of rank
   round(q·(R − 1)) of {ρ_i} over the R anchors.
4. λ_i = σ(κ_ρ(log ρ_0 − log ρ_i)) · σ(κ_AIC(ΔAIC_i − m)).

Differences between the paper's text (the defaults here) and the official code, each an option:

* ``beta_mode="per_anchor"`` (default, the README formula) uses β_i = β̂_i, the anchor's own Weibull
  slope. The code's ``tlambda_select`` uses β = 1 (``beta_mode="one"``; its comment reads "beta is
  effectively λ in the mixture"). ``beta_mode="global_ema"`` uses the code's batch-level β_t
  (``auto_weib_beta``): OLS on the smallest ``tail_frac`` (≥ ``min_tail``) shortfalls of all the batch's
  negatives, accepted when R² ≥ ``r2_min``, clamped to [``beta_min``, ``beta_max``], then an EMA with
  momentum 0.9 from 4.0. Its state is explicit: ``beta_ema`` in, ``WEINCEStats.beta_ema`` out (the
  module keeps it in a buffer).
* The reproduction scripts add 0.5·L_Weibit-top50 (with β_t) + 0.5·L_PL-top50 (``aux_top_m=50``,
  ``aux_weight=0.5``); the headline formula does not, so ``aux_top_m=0`` by default. The code caps the
  top-M size at 2N − 1 columns of a matrix with 2N − 2 valid negatives; here it is capped at K.
* The code's ``WEINCELoss`` analogue updates β_t on every call; the module here updates its buffer only
  in training mode (an evaluation pass does not move the state).
* When an anchor has K ≤ 2 negatives no tail fit is possible; the code then sets ΔAIC = 0 and pivots on
  the median, here ΔAIC = 0, β̂ = 0 and the pivot stays the q-order statistic.
* Similarities are computed as normalised rows' dot products instead of ``nn.CosineSimilarity``
  (which divides by max(‖x‖‖y‖, 1e-8)). In float32 they err by up to ~8e-7 near s = 1 (D = 128), and the
  statistics read log(1 − s), which amplifies that error by 1/(1 − s). So a float32 row whose largest
  tail cosine is within :data:`ENDPOINT_SHORTFALL` (1/4) of the endpoint has its tail recomputed from
  float64 cosines (the fused kernel's 1 − s of that row and column too); its λ, ΔAIC and β̂ then equal those of
  a float64 computation on the same inputs (measured: identical on clustered batches with
  1 − s down to 7e-5). Rows farther out keep float32 cosines; measured against float64 on the same
  inputs (2N = 256, D = 128, smallest ρ 0.31–0.61): λ within 1.4e-5, ΔAIC within 8e-4, β̂ within
  2e-6 relative (``tests/losses/weince/test_weince.py``; docs/weince.md).
* The statistics are computed in float64 (numpy, on the host; a GPU's (2N, k_tail) tail values are
  copied over once per step) from the k_tail largest negatives (float32 on the GPU in the code).
* The loss runs with autocast disabled, in float32 (float64 for float64 inputs): −log(1 − s) has
  slope 1/(1 − s), and the code's clamp s ≤ 1 − 1e-6 needs more than bf16's 8 bits.

With λ ≡ 0 (``fixed_lambda=0``, or every gate closed) the loss is computed by ``nt_xent`` /
``info_nce`` themselves, so it equals them bit for bit; the mixing code with a vanishing λ agrees
with them to rounding (tested).

Computation, SimCLR's views: while the 2N × 2N matrix fits one block of
:data:`~contrastlab.losses.weince.stream.STREAM_BLOCK_BYTES` (2N ≤ 1,448 in float32), in one process,
with a fixed τ and no auxiliary terms, the **fused single-block kernel**: one GEMM for the cosines, a
tail selection that sorts them in place (numpy's vectorised sort, on the CPU), the statistics in
float64 numpy on the (2N, k_tail) tail (tens of microseconds instead of torch's per-op dispatch), and
one fused autograd function, :class:`_WeinceSimCLR`, on the raw views, their normalised form and the
shortfalls 1 − s (the row maximum of ℓ is known from the row's largest cosine, so no pass finds it; the
symmetric matrix is read by columns, so that every per-anchor coefficient broadcasts along the inner
dimension and the Weibit exponent costs three vectorised passes). When the rows are reduced by a mean
or a sum, the fused function also forms the gradient in its forward, through the normalisation, while
its two (2N, 2N) buffers are hot, and the backward only scales it (as ``dense_row_lse(grad_ahead=True)``
does for NT-Xent); with ``reduction="none"`` it keeps E and 1 − s for a backward of two passes and two
GEMMs. Otherwise (larger batches, ``chunk_size``, gathered candidates, a learnable τ, the auxiliary
terms) the **streamed kernel** (:mod:`contrastlab.losses.weince.stream`): a statistics sweep and a loss
sweep over blocks of anchors against all 2N views, memory O(N·D + N·chunk), the same statistics (each
anchor's tail is selected from its complete row) and the same loss to rounding. Explicit negatives use
the logits s/τ of the anchors against their candidates with their autograd graph and
:class:`_MixedCrossEntropy` (plain autograd for a learnable τ).

Under torch.distributed (``gather=True``) each rank computes the single-process WEINCE of the global
batch restricted to its own rows, through the streamed kernel: the raw rows of every rank are gathered
with exact gradients and normalised locally (so the float64 recomputation near the endpoint sees the
same inputs as one process, and every rank's crowded views are gathered so that the same shortfalls are
recomputed); local view-a row i is candidate ``offset + i``, its positive ``N + offset + i``;
the per-anchor tails come from each local anchor's 2N − 2 global negatives; the pivot ρ_0 is the
q-order statistic of every rank's ρ (gathered without gradient); the global β_t fits the pooled k_tail
largest negatives of every rank, so its EMA state advances identically everywhere. Shared negatives
are gathered into one set, per-anchor negatives stay local. In one process every gather does nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab._checks import check_bool, check_choice, check_positive_float
from contrastlab.losses import tiled
from contrastlab.losses._common import (
    REDUCTIONS,
    TemperatureLike,
    check_finite_loss,
    check_inputs,
    check_temperature,
    device_of,
    gather_rows,
    l2_normalize,
    temperature_repr,
)
from contrastlab.losses._docs import shared_docs
from contrastlab.losses.compiled_choice import check_compiled
from contrastlab.losses.info_nce import info_nce
from contrastlab.losses.nt_xent import nt_xent
from contrastlab.losses.weince.kernels import (
    _mixed_cross_entropy_autograd,
    _MixedCrossEntropy,
    _u_min,
    _weibit,
    _weince_rows,
    _WeinceSimCLR,
)
from contrastlab.losses.weince.options import GlobalBetaConfig, WEINCEOptions
from contrastlab.losses.weince.stream import (
    STREAM_BLOCK_BYTES,
    Refinement,
    SweepPlan,
    _WeinceStream,
    block_anchors,
    coefficients,
    compiled_is_faster,
    gather_dot,
    streamed_tail,
)
from contrastlab.losses.weince.tail import (
    AnchorTailStats,
    _anchor_tail_stats,
    _crowded_rows,
    _refine_rows,
    _tail_gates,
    _top_values,
    global_tail_beta,
    global_tail_beta_pooled,
    tail_size,
    update_beta_ema,
)

__all__ = ["weince", "weince_with", "WEINCELoss", "WEINCEStats"]


class WEINCEStats(NamedTuple):
    """What :func:`weince` returns with ``return_stats=True``, next to the loss.

    Attributes:
        tail: the per-anchor statistics (λ_i, β̂_i, ΔAIC_i, ρ_i, ...).
        beta: the β_i used in the Weibit logit. Shape ``(R,)``.
        beta_ema: the global β_t after this batch (the state to pass as ``beta_ema`` next time), a 0-d
            tensor; ``None`` when neither ``beta_mode="global_ema"`` nor the top-M terms need it.
        beta_global_hat: this batch's raw global β̂ (before acceptance/clamp/EMA), or ``None``.
        beta_global_r2: that fit's R², or ``None``.
    """

    tail: AnchorTailStats
    beta: Tensor
    beta_ema: Tensor | None
    beta_global_hat: float | None
    beta_global_r2: float | None


@shared_docs
def weince(
    z_a: Tensor,
    z_b: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: TemperatureLike = 0.5,
    beta_mode: str = "per_anchor",
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    margin: float = 2.0,
    eps: float = 1e-6,
    fixed_lambda: float | None = None,
    aux_top_m: int = 0,
    aux_weight: float = 0.5,
    global_beta: GlobalBetaConfig = GlobalBetaConfig(),  # noqa: B008 (frozen dataclass, immutable)
    beta_ema: float | Tensor | None = None,
    reduction: str = "mean",
    return_stats: bool = False,
    gather: bool = False,
    chunk_size: int | None = None,
    compiled: bool | str = False,
) -> Tensor | tuple[Tensor, WEINCEStats]:
    """WEINCE loss (Erol et al. 2026, README formula; statistics as in the official code, §2.3).

    Args:
        z_a: {z_a} The anchors.
        z_b: {z_b}
        negatives: ``None`` — SimCLR's 2N views (each view against the other 2N − 2, both directions,
            as NT-Xent); ``(M, D)`` — every anchor ``z_a[i]`` against its positive ``z_b[i]`` and the M
            shared negatives; ``(N, K, D)`` — against K negatives of its own. Rows are L2-normalised.
        temperature: {temperature} It divides the softmax logit s/τ.
        beta_mode: β_i of the Weibit logit: ``"per_anchor"`` (β̂_i, the paper's text), ``"one"`` (the
            official code) or ``"global_ema"`` (the code's batch-level EMA β_t).
        q: quantile of the cap-proximity pivot ρ_0.
        tail_frac: fraction of each anchor's negatives in its tail fit.
        min_tail: minimum tail size (then clipped to [10, K]).
        kappa_rho: steepness κ_ρ ≥ 0 of the cap-proximity gate.
        kappa_aic: steepness κ_AIC ≥ 0 of the Weibull-vs-Gumbel gate.
        margin: ΔAIC margin m (the paper's grid: 0, 2, 6).
        eps: s is clamped to ≤ 1 − eps in −log(1 − s) and shortfalls floored at eps.
        fixed_lambda: if given, λ_i ≡ this value in [0, 1] instead of the statistics (ablations: 0 gives
            NT-Xent / InfoNCE exactly, 1 the pure Weibit loss with β_i).
        aux_top_m: M > 0 adds the reproduction script's auxiliary terms
            ``aux_weight·(L_Weibit-topM + L_PL-topM)``: cross-entropies over [positive | the M hardest
            negatives] with logits −β_t log(1 − s) and s/τ (the scripts use M = 50, weight 0.5).
        aux_weight: the weight of each auxiliary term (≥ 0).
        global_beta: configuration of the global β_t (``beta_mode="global_ema"`` and the top-M term).
        beta_ema: β_{t−1}, the global EMA state; ``None`` starts from ``global_beta.init``. Not modified.
        reduction: {reductions} (per-anchor losses: ``(2N,)`` with the views of
            ``z_a`` first, or ``(N,)`` with explicit negatives).
        return_stats: also return :class:`WEINCEStats` (λ_i, β_i, ΔAIC_i, ..., the new β_t).
        gather: under torch.distributed, the single-process WEINCE of the global batch from this
            rank's rows: candidates gathered from every rank, every batch statistic over the global
            candidate set. {gather_share} ``stats.tail`` and ``stats.beta`` then hold this
            rank's anchors, ``rho0`` the global pivot and ``beta_ema`` the new global β_t (the same
            on every rank). N ≥ 2 is required of the global batch.
        chunk_size: SimCLR's views (``negatives=None``) are computed in blocks of ``chunk_size`` anchors
            against all 2N views (memory O(N·D + N·chunk_size), never the 2N × 2N matrix; the same
            numbers as one block). ``None`` chooses: one fused block while the 2N × 2N matrix fits
            :data:`contrastlab.losses.weince.stream.STREAM_BLOCK_BYTES` (2N ≤ 1,448 in float32, one
            process, a fixed τ, no auxiliary terms), else blocks of that many bytes. Explicit
            negatives are computed densely (their N × M or N × K logits).
        compiled: ``True``: SimCLR's views take the streamed kernel with each block's element-wise work
            done by functions compiled by ``torch.compile`` (:mod:`contrastlab.losses.weince.compiled`)
            instead of the eager passes, the reference and the default (``False``); {compiled_auto}
            ``"auto"`` takes the streamed kernel either way. Explicit negatives ignore ``compiled``.

    Returns:
        The loss (float32, float64 for float64 inputs), or ``(loss, stats)``.

    Raises:
        TypeError, ValueError: invalid inputs, named in the message.

    Examples:
        >>> za, zb = torch.randn(64, 16), torch.randn(64, 16)
        >>> loss, stats = weince(za, zb, return_stats=True)
        >>> loss.shape, stats.tail.lam.shape
        (torch.Size([]), torch.Size([128]))
        >>> from contrastlab.losses import nt_xent
        >>> bool(weince(za, zb, fixed_lambda=0.0) == nt_xent(za, zb))
        True
    """
    options = WEINCEOptions(
        beta_mode=beta_mode,
        q=q,
        tail_frac=tail_frac,
        min_tail=min_tail,
        kappa_rho=kappa_rho,
        kappa_aic=kappa_aic,
        margin=margin,
        eps=eps,
        fixed_lambda=fixed_lambda,
        aux_top_m=aux_top_m,
        aux_weight=aux_weight,
        global_beta=global_beta,
    )
    return weince_with(
        z_a,
        z_b,
        negatives,
        options,
        temperature=temperature,
        beta_ema=beta_ema,
        reduction=reduction,
        return_stats=return_stats,
        gather=gather,
        chunk_size=chunk_size,
        compiled=compiled,
    )


def _normalized(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(x / ‖x‖, 1/‖x‖)`` over rows, without gradient; a zero row stays zero (its factor is 1).

    The numbers of :func:`contrastlab.losses.tiled.normalize_scale` (same operations), for the fused
    kernel, which applies the normalisation's Jacobian itself. Shape: x ``(R, D)``; returns ``(R, D)``,
    ``(R, 1)``.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    inv_norm = 1.0 / torch.where(norm > 0, norm, torch.ones_like(norm))
    return x * inv_norm, inv_norm


def _any_nonzero(x: Tensor) -> bool:
    """Whether ``x`` has a nonzero entry (through numpy on the CPU: no dispatch, no thread hand-off)."""
    return bool(x.numpy().any()) if x.device.type == "cpu" else bool(x.any())


def _autocast_off(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """A context with autocast disabled on ``device`` (a no-op context when it is not enabled there)."""
    if torch.is_autocast_enabled(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=16)
def _simclr_columns(n: int, big_n: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(self_cols, pos_index)``: the columns of the 2n local views and of their positives among 2N candidates.

    Local view-a row i is candidate ``offset + i`` and its positive ``N + offset + i``; view-b row i the
    reverse. The same for every step of a run, so cached (read-only: nothing writes into them).
    """
    idx = torch.arange(n, device=device)
    a_cols, b_cols = offset + idx, big_n + offset + idx
    return torch.cat([a_cols, b_cols]), torch.cat([b_cols, a_cols])


def _beta_prev(beta_ema: float | Tensor | None, config: GlobalBetaConfig) -> float:
    """β_{t−1}: ``beta_ema`` validated, or the EMA's starting value."""
    if beta_ema is None:
        return config.init
    if isinstance(beta_ema, Tensor):
        if beta_ema.numel() != 1:
            raise ValueError(f"beta_ema must be a scalar, got a tensor of shape {tuple(beta_ema.shape)}")
        return check_positive_float("beta_ema", float(beta_ema.detach()))
    return check_positive_float("beta_ema", beta_ema)


class _Parts(NamedTuple):
    """What each path of :func:`weince_with` hands back: the loss and the statistics it used."""

    loss: Tensor
    reduced: bool  # whether ``loss`` is already the reduction of the rows
    tail: AnchorTailStats
    beta: Tensor
    beta_t: float | None
    estimate: tuple[float, float] | None


class _Call(NamedTuple):
    """One validated call of :func:`weince_with`: its inputs, options and what the checks resolved."""

    z_a: Tensor
    z_b: Tensor
    a: Tensor  # z_a in the compute dtype
    b: Tensor
    options: WEINCEOptions
    temperature: TemperatureLike
    inv_t: Tensor | float
    beta_prev: float
    dtype: torch.dtype
    reduction: str
    gather: bool
    gathered: bool  # candidates come from other ranks too
    n_global: int
    chunk_size: int | None
    compiled: bool | str


def weince_with(
    z_a: Tensor,
    z_b: Tensor,
    negatives: Tensor | None,
    options: WEINCEOptions,
    *,
    temperature: TemperatureLike = 0.5,
    beta_ema: float | Tensor | None = None,
    reduction: str = "mean",
    return_stats: bool = False,
    gather: bool = False,
    chunk_size: int | None = None,
    compiled: bool | str = False,
) -> Tensor | tuple[Tensor, WEINCEStats]:
    """:func:`weince` with its hyperparameters given as one validated :class:`WEINCEOptions`.

    What :func:`weince` and :class:`WEINCELoss` call; arguments, shapes and results as in :func:`weince`.
    """
    if not isinstance(options, WEINCEOptions):
        raise TypeError(f"options must be a WEINCEOptions, got {type(options).__name__}")
    check_bool("gather", gather)
    checked: dict[str, Any] = {}

    def check() -> int:
        n_local, checked["dtype"], checked["inv_t"] = check_inputs(
            z_a, z_b, negatives, temperature=temperature, reduction=reduction, names=("z_a", "z_b")
        )
        check_bool("return_stats", return_stats)
        check_compiled(compiled)
        checked["chunk_size"] = tiled.check_chunk_size(chunk_size)
        checked["beta_prev"] = _beta_prev(beta_ema, options.global_beta)
        return n_local

    n_global = sum(cd.agree(check, gather=gather, device=device_of(z_a)))
    if negatives is None and n_global < 2:
        raise ValueError(f"z_a must have N >= 2 rows: with N = {n_global} a view has no negatives to fit a tail to")
    o, dtype, inv_t = options, checked["dtype"], checked["inv_t"]
    gathered = gather and cd.world_size() > 1
    with _autocast_off(z_a.device):
        call = _Call(
            z_a,
            z_b,
            z_a.to(dtype),
            z_b.to(dtype),
            o,
            temperature,
            inv_t,
            checked["beta_prev"],
            dtype,
            reduction,
            gather,
            gathered,
            n_global,
            checked["chunk_size"],
            compiled,
        )
        if negatives is not None:
            parts = _explicit_negatives(call, negatives)
        elif _fused(call):
            parts = _simclr_fused(call)
        else:
            parts = _simclr_streamed(call)
    loss = parts.loss
    if not parts.reduced:
        count = 2 * n_global if negatives is None else n_global
        loss = cd.share(loss, reduction, count, gather=gather)
    out = check_finite_loss(loss, "z_a/z_b", gather=gather)
    if not return_stats:
        return out
    stats = WEINCEStats(
        tail=parts.tail,
        beta=parts.beta.detach(),
        beta_ema=None if parts.beta_t is None else torch.tensor(parts.beta_t, dtype=torch.float64),
        beta_global_hat=None if parts.estimate is None else parts.estimate[0],
        beta_global_r2=None if parts.estimate is None else parts.estimate[1],
    )
    return out, stats


def _fused(call: _Call) -> bool:
    """Whether SimCLR's views take the fused single-block kernel (:class:`_WeinceSimCLR`).

    One process, a fixed τ, no auxiliary terms, no ``chunk_size``, not ``compiled`` (the compiled
    pass is the streamed kernel's) and a 2N × 2N matrix within one
    block of the streamed sweep (:data:`STREAM_BLOCK_BYTES`: 2N ≤ 1,448 in float32): there the
    whole matrix is the one block, and the fused kernel, which reads it once for the statistics and
    keeps it for the loss, makes one GEMM fewer than the streamed sweeps.
    """
    c = 2 * call.n_global
    itemsize = torch.finfo(call.dtype).bits // 8
    return (
        call.chunk_size is None
        and not call.compiled
        and isinstance(call.inv_t, float)
        and call.options.aux_top_m == 0
        and not call.gathered
        and c * c * itemsize <= STREAM_BLOCK_BYTES
    )


def _global_beta(call: _Call, estimate: tuple[float, float] | None) -> float:
    """β_t after this batch's global estimate (the EMA step)."""
    return update_beta_ema(call.beta_prev, estimate, call.options.global_beta)


def _lam_beta(call: _Call, tail: AnchorTailStats, beta_t: float | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(λ, β, λβ)``, each ``(R,)`` in the compute dtype: stop-gradient constants of the loss."""
    o, dtype = call.options, call.dtype
    lam = tail.lam.to(dtype) if o.fixed_lambda is None else torch.full_like(tail.lam, o.fixed_lambda, dtype=dtype)
    if o.beta_mode == "per_anchor":
        beta = tail.beta_hat.to(dtype)
    elif o.beta_mode == "one":
        beta = torch.ones_like(lam)
    else:
        assert beta_t is not None
        beta = torch.full_like(lam, beta_t)
    return lam, beta, lam if o.beta_mode == "one" else lam * beta


def _softmax_loss(call: _Call, negatives: Tensor | None) -> tuple[Tensor, bool]:
    """λ ≡ 0: the loss of ``nt_xent`` / ``info_nce`` themselves (the same numbers), and whether it is reduced.

    Reduced by them when no auxiliary term is added to the rows (their streamed kernels then never
    keep the logits).
    """
    reduction = call.reduction if call.options.aux_top_m == 0 else "none"
    t = call.temperature
    if negatives is None:
        loss = nt_xent(call.z_a, call.z_b, temperature=t, reduction=reduction)
    else:
        loss = info_nce(call.z_a, call.z_b, negatives, temperature=t, reduction=reduction)
    return loss, reduction != "none"


def _simclr_fused(call: _Call) -> _Parts:
    """SimCLR's views in one block: one (2N, 2N) cosine buffer, the tails sorted in place, the fused kernel."""
    o, dtype, inv_t = call.options, call.dtype, call.inv_t
    assert isinstance(inv_t, float)
    device = call.a.device
    n = call.a.shape[0]
    raw = torch.cat([call.a, call.b], dim=0)  # (2N, D)
    with torch.no_grad():  # the fused kernel takes the gradient through the normalisation itself
        views, inv_norm = _normalized(raw)
    self_cols, pos_index = _simclr_columns(n, n, 0, device)  # (2N,) each
    need_global = o.beta_mode == "global_ema"
    # 1 − s is kept and the tail selection sorts the cosines in place (unless the global tail reads them
    # again); E is then written over them: two (2N, 2N) buffers per step, in one allocation.
    work = views.new_empty(2, 2 * n, 2 * n)
    with torch.no_grad():
        cos = torch.mm(views, views.T, out=work[0])  # (2N, 2N)
        s_pos = cos.gather(1, pos_index.unsqueeze(1))  # (2N, 1), read before the sort
        u = torch.sub(torch.ones((), dtype=dtype, device=device), cos, out=work[1])  # 1 − s
        estimate: tuple[float, float] | None = None
        if need_global:  # the negatives alone, −inf elsewhere
            neg_only = cos.clone()
            rows_r = torch.arange(2 * n, device=device)
            neg_only[rows_r, self_cols] = float("-inf")
            neg_only[rows_r, pos_index] = float("-inf")
            gb = o.global_beta
            estimate = global_tail_beta(neg_only, tail_frac=gb.tail_frac, min_tail=gb.min_tail, eps=o.eps)
            del neg_only
        k_tail = tail_size(2 * n - 2, o.tail_frac, o.min_tail)
        top = _top_values(cos, k_tail, exclude=(self_cols, pos_index), inplace=True)
        crowded = _crowded_rows(top, dtype)
        if crowded.numel():  # float64 cosines for these rows: their shortfalls 1 − s keep their digits
            views64 = tiled.normalize_scale(raw.detach().to(torch.float64))
            cos64 = views64[crowded] @ views64.T  # (r, 2N)
            u64 = torch.rsub(cos64, 1.0).to(dtype)  # the fused kernel's 1 − s (symmetric: rows and columns)
            u[crowded] = u64
            u[:, crowded] = u64.T
            s_pos[crowded] = cos64.gather(1, pos_index[crowded].unsqueeze(1)).to(dtype)
            excl = (self_cols[crowded], pos_index[crowded])
            top = _refine_rows(top, crowded, _top_values(cos64, k_tail, exclude=excl, inplace=True))
    tail = _anchor_tail_stats(top, o)
    beta_t = _global_beta(call, estimate) if need_global else None
    lam, beta, lam_beta = _lam_beta(call, tail, beta_t)
    if not _any_nonzero(lam):  # λ ≡ 0: NT-Xent; its kernel (same numbers)
        loss, reduced = _softmax_loss(call, None)
        return _Parts(loss, reduced, tail, beta, beta_t, estimate)
    s_max = torch.maximum(top[:, :1].to(dtype), s_pos)  # (2N, 1)
    coef = torch.rsub(lam.unsqueeze(1), inv_t, alpha=inv_t)  # (1 − λ)/τ
    lam_b = lam_beta.unsqueeze(1)
    reduced = False
    if torch.is_grad_enabled() and raw.requires_grad:
        ahead = not tiled.keeps_logits(call.reduction, raw)  # a mean or sum: the gradient in the forward
        reduced = ahead  # the fused function reduces the rows itself (cd.share's numbers: one process)
        loss = _WeinceSimCLR.apply(
            raw,
            u,
            pos_index,
            coef,
            lam_b,
            s_max,
            o.eps,
            ahead,
            work[0],
            views,
            inv_norm,
            call.reduction if reduced else None,
        )
    else:
        loss = _weince_rows(u, pos_index, coef, lam_b, s_max, _u_min(o.eps, dtype), work[0])[2]
    return _Parts(loss, reduced, tail, beta, beta_t, estimate)


def _simclr_streamed(call: _Call) -> _Parts:
    """SimCLR's views in blocks of anchors (:mod:`contrastlab.losses.weince.stream`): O(N·D + N·chunk) memory.

    Under torch.distributed the local anchors are contrasted with every rank's views; every batch
    statistic (ρ_0, the global tail, the float64 recomputation) is the global batch's.
    """
    o, dtype, inv_t, gathered = call.options, call.dtype, call.inv_t, call.gathered
    device = call.a.device
    n = call.a.shape[0]
    itemsize = torch.finfo(dtype).bits // 8
    # The raw rows of every rank, normalised here (candidates, with gradient); local view-a row i is
    # candidate offset + i, its positive N + offset + i (and vice versa).
    a_all, offset = gather_rows(call.a, call.gather)
    b_all, _ = gather_rows(call.b, call.gather)
    big_n = a_all.shape[0]
    raw = torch.cat([a_all, b_all], dim=0)  # (2N, D)
    views = tiled.normalize_scale(raw)
    self_cols, pos_index = _simclr_columns(n, big_n, offset, device)  # (2n,) each
    local = views if not gathered else torch.cat([views[offset : offset + n], views[big_n + offset :][:n]])
    k_neg = 2 * big_n - 2
    total = 2 * call.n_global * k_neg  # negatives of the global batch
    need_global = o.needs_global_beta
    gb = o.global_beta
    pool_k = min(int(max(gb.min_tail, gb.tail_frac * total)), total) if need_global else 0
    top_m = min(o.aux_top_m, k_neg)
    rows = block_anchors(2 * big_n, itemsize, call.chunk_size)

    @functools.cache
    def views64() -> Tensor:
        return tiled.normalize_scale(raw.detach().to(torch.float64))

    k_tail = tail_size(k_neg, o.tail_frac, o.min_tail)
    st = streamed_tail(
        local,
        views,
        self_cols,
        pos_index,
        k_tail=k_tail,
        rows=rows,
        eps=o.eps,
        views64=views64,
        pool_k=pool_k,
        top_m=top_m,
    )
    rho_pool = cd.gather_no_grad if gathered else None  # the pivot ρ_0 over every rank's anchors
    tail = _tail_gates(st.fits, k_tail, device, o, rho_pool)
    estimate: tuple[float, float] | None = None
    beta_t: float | None = None
    if need_global:
        assert st.pool is not None
        pool = cd.gather_no_grad(st.pool) if gathered else st.pool  # holds the global batch's largest
        estimate = global_tail_beta(pool, tail_frac=gb.tail_frac, min_tail=gb.min_tail, eps=o.eps, total=total)
        beta_t = _global_beta(call, estimate)
    lam, beta, lam_beta = _lam_beta(call, tail, beta_t)
    reduced = False
    if not gathered and not _any_nonzero(lam):  # λ ≡ 0: NT-Xent; its kernel (same numbers)
        loss, reduced = _softmax_loss(call, None)
    else:
        refine = _refinement(call, st.crowded, views64, n) if dtype != torch.float64 else None
        inv_f = inv_t if isinstance(inv_t, float) else float(inv_t.detach())
        co = coefficients(lam, lam_beta, st.s_max, inv_f, _u_min(o.eps, dtype))
        inv_tensor = inv_t if isinstance(inv_t, Tensor) else torch.tensor(inv_t, dtype=dtype, device=device)
        ahead = torch.is_grad_enabled() and raw.requires_grad and call.reduction != "none"
        plan = SweepPlan(pos_index, self_cols, co, refine, rows)
        use = call.compiled
        if use == "auto":
            use = compiled_is_faster(local, views, plan, ahead)
        loss = _WeinceStream.apply(local, views, inv_tensor, plan, ahead, use)
    if o.aux_top_m > 0:
        assert beta_t is not None and st.top_idx is not None
        idx = torch.cat([pos_index.unsqueeze(1), st.top_idx], dim=1)  # (R, 1 + M): [positive | M hardest]
        loss = loss + _aux_terms(gather_dot(local * inv_t, views, idx, rows=rows), beta_t, inv_t, o)
    return _Parts(loss, reduced, tail, beta, beta_t, estimate)


def _aux_terms(p_logits: Tensor, beta_t: float, inv_t: Tensor | float, o: WEINCEOptions) -> Tensor:
    """The reproduction scripts' ``aux_weight·(L_Weibit-topM + L_PL-topM)`` per row.

    ``p_logits`` ``(R, 1 + M)`` are the logits s/τ of [positive | the M hardest negatives]; the Weibit
    term's logits are −β_t log(1 − s) of the same entries. Returns ``(R,)``.
    """
    w_logits = beta_t * _weibit(p_logits / inv_t, o.eps)
    aux = (torch.logsumexp(w_logits, dim=1) - w_logits[:, 0]) + (torch.logsumexp(p_logits, dim=1) - p_logits[:, 0])
    return o.aux_weight * aux


def _refinement(call: _Call, crowded: Tensor, views64: Callable[[], Tensor], n: int) -> Refinement | None:
    """Where the float32 loss reads float64 shortfalls: the crowded anchors of every rank (rows and columns).

    Under torch.distributed each rank's crowded views are all-gathered (no gradient), so that every rank
    recomputes the same entries as one process would.
    """
    mask = torch.zeros(2 * n, dtype=torch.bool, device=call.a.device)
    mask[crowded] = True
    if call.gathered:  # as uint8: every backend all-gathers bytes
        flags = mask.to(torch.uint8)
        cand = torch.cat([cd.gather_no_grad(flags[:n]), cd.gather_no_grad(flags[n:])]).bool()
    else:
        cand = mask
    if not bool(cand.any()):
        return None
    return Refinement(views64(), mask, torch.nonzero(cand).squeeze(1))


def _explicit_negatives(call: _Call, negatives: Tensor) -> _Parts:
    """Explicit candidate sets, as ``info_nce``: shared ``(M, D)`` or per-anchor ``(N, K, D)`` negatives (dense)."""
    o, dtype, inv_t = call.options, call.dtype, call.inv_t
    device = call.a.device
    n = call.a.shape[0]
    a, b = l2_normalize(call.a), l2_normalize(call.b)
    negs_raw = negatives.to(dtype)
    if negs_raw.ndim == 2:
        negs_raw, _ = gather_rows(negs_raw, call.gather)  # every rank's shared negatives: one set
    nv = l2_normalize(negs_raw)
    a_s = a * inv_t
    pos_pl = (a_s * b).sum(dim=1, keepdim=True)  # (n, 1)
    neg_pl = a_s @ nv.T if nv.ndim == 2 else torch.bmm(nv, a_s.unsqueeze(2)).squeeze(2)  # (n, K)
    logits_pl = torch.cat([pos_pl, neg_pl], dim=1)  # (n, 1 + K): the positive is column 0
    pos_index = torch.zeros(n, dtype=torch.long, device=device)
    k_neg = neg_pl.shape[1]
    tau_det = 1.0 / inv_t if isinstance(inv_t, float) else float(1.0 / inv_t.detach())

    # §2.3 statistics on the k_tail hardest negatives; s/τ is increasing in s, so select on the logits.
    k_tail = tail_size(k_neg, o.tail_frac, o.min_tail)
    top = _top_values(neg_pl, k_tail) * tau_det
    crowded = _crowded_rows(top, dtype)
    if crowded.numel():
        with torch.no_grad():
            a64 = l2_normalize(call.z_a.detach()[crowded].to(torch.float64))  # (r, D)
            n64 = l2_normalize(negs_raw.detach().to(torch.float64))
            if n64.ndim == 2:
                neg64 = a64 @ n64.T  # (r, M)
            else:
                neg64 = torch.bmm(n64[crowded], a64.unsqueeze(2)).squeeze(2)  # (r, K)
            top = _refine_rows(top, crowded, _top_values(neg64, k_tail, inplace=True))
    rho_pool = cd.gather_no_grad if call.gathered else None  # the pivot ρ_0 over every rank's anchors
    tail = _anchor_tail_stats(top, o, rho_pool)
    need_global = o.needs_global_beta
    beta_t: float | None = None
    estimate: tuple[float, float] | None = None
    neg_only: Tensor | None = None
    if need_global:
        with torch.no_grad():  # the negatives alone, −inf elsewhere
            neg_only = logits_pl.detach() * tau_det
            neg_only[torch.arange(n, device=device), pos_index] = float("-inf")
        gb = o.global_beta
        estimate = global_tail_beta_pooled(
            neg_only, tail_frac=gb.tail_frac, min_tail=gb.min_tail, eps=o.eps, gather=call.gathered
        )
        beta_t = _global_beta(call, estimate)
    lam, beta, lam_beta = _lam_beta(call, tail, beta_t)
    lam_c, lam_b = lam.unsqueeze(1), lam_beta.unsqueeze(1)  # (R, 1): stop-gradient constants
    reduced = False
    if not call.gathered and not _any_nonzero(lam):  # λ ≡ 0: InfoNCE; its kernel (same numbers)
        loss, reduced = _softmax_loss(call, negatives)
    elif isinstance(inv_t, float):
        loss = _MixedCrossEntropy.apply(logits_pl, pos_index, 1.0 - lam_c, lam_b, tau_det, o.eps, None)
    else:  # a learnable τ: plain autograd (the Weibit term must not depend on τ through s/τ)
        loss = _mixed_cross_entropy_autograd(logits_pl, pos_index, lam_c, lam_b, inv_t, o.eps, None)

    if o.aux_top_m > 0:
        assert beta_t is not None and neg_only is not None
        m = min(o.aux_top_m, k_neg)
        top_idx = torch.topk(neg_only, k=m, dim=1).indices  # (R, M) hardest negatives
        p_logits = torch.cat([logits_pl.gather(1, pos_index.unsqueeze(1)), logits_pl.gather(1, top_idx)], dim=1)
        loss = loss + _aux_terms(p_logits, beta_t, inv_t, o)
    return _Parts(loss, reduced, tail, beta, beta_t, estimate)


class WEINCELoss(nn.Module):
    """Module form of :func:`weince`; its options are built and validated once, at construction.

    With ``beta_mode="global_ema"`` or ``aux_top_m > 0`` the global β_t lives in the buffer
    ``beta_ema`` (saved in the state dict). It is updated by ``forward`` in training mode only.
    ``last_stats`` holds the :class:`WEINCEStats` of the latest call (for logging λ and β).

    Examples:
        >>> loss_fn = WEINCELoss(beta_mode="global_ema")
        >>> loss = loss_fn(torch.randn(64, 16), torch.randn(64, 16))
        >>> float(loss_fn.beta_ema) > 0
        True
    """

    beta_ema: Tensor

    def __init__(
        self,
        temperature: TemperatureLike = 0.5,
        beta_mode: str = "per_anchor",
        q: float = 0.2,
        tail_frac: float = 0.1,
        min_tail: int = 32,
        kappa_rho: float = 10.0,
        kappa_aic: float = 1.0,
        margin: float = 2.0,
        eps: float = 1e-6,
        fixed_lambda: float | None = None,
        aux_top_m: int = 0,
        aux_weight: float = 0.5,
        global_beta: GlobalBetaConfig = GlobalBetaConfig(),  # noqa: B008 (frozen dataclass, immutable)
        reduction: str = "mean",
        gather: bool = False,
        chunk_size: int | None = None,
        compiled: bool | str = False,
    ) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature)
        self.options = WEINCEOptions(
            beta_mode=beta_mode,
            q=q,
            tail_frac=tail_frac,
            min_tail=min_tail,
            kappa_rho=kappa_rho,
            kappa_aic=kappa_aic,
            margin=margin,
            eps=eps,
            fixed_lambda=fixed_lambda,
            aux_top_m=aux_top_m,
            aux_weight=aux_weight,
            global_beta=global_beta,
        )
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        self.gather = check_bool("gather", gather)  # every rank's β_t state moves alike under gather
        self.chunk_size = tiled.check_chunk_size(chunk_size)
        self.compiled = check_compiled(compiled)
        self.register_buffer("beta_ema", torch.tensor(float(global_beta.init), dtype=torch.float64))
        self.last_stats: WEINCEStats | None = None

    def forward(self, z_a: Tensor, z_b: Tensor, negatives: Tensor | None = None) -> Tensor:
        """Compute the loss; see :func:`weince` for shapes. Updates ``beta_ema`` in training mode."""
        loss, stats = weince_with(
            z_a,
            z_b,
            negatives,
            self.options,
            temperature=self.temperature,
            beta_ema=self.beta_ema,
            reduction=self.reduction,
            return_stats=True,
            gather=self.gather,
            chunk_size=self.chunk_size,
            compiled=self.compiled,
        )
        if self.training and stats.beta_ema is not None:
            self.beta_ema.copy_(stats.beta_ema)
        self.last_stats = stats
        return loss

    def extra_repr(self) -> str:
        """Hyperparameters shown in ``repr``."""
        t = temperature_repr(self.temperature)
        chunk = "" if self.chunk_size is None else f", chunk_size={self.chunk_size}"
        return f"temperature={t}, options={self.options}{chunk}"
