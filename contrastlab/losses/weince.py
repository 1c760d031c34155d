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
from its K negatives, exactly as the official code of Erol et al. 2026 (arXiv 2606.00262) does:

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
  (which divides by max(‖x‖‖y‖, 1e-8)); they differ only in the last bits.
* The statistics are computed in float64 (numpy, on the host; a GPU's (2N, k_tail) tail values are
  copied over once per step) from the k_tail largest negatives (float32 on the GPU in the code); they
  agree with a float32 computation to ~1e-3 in λ.
* The loss runs with autocast disabled, in float32 (float64 for float64 inputs): −log(1 − s) has
  slope 1/(1 − s), and the code's clamp s ≤ 1 − 1e-6 needs more than bf16's 8 bits.

With λ ≡ 0 (``fixed_lambda=0``, or every gate closed) the loss is computed by ``nt_xent`` /
``info_nce`` themselves, so it equals them bit for bit; the mixing code with a vanishing λ agrees
with them to rounding (tested).

Computation: the default case (2N views, a fixed τ, no auxiliary terms) is one GEMM for the cosines,
a tail selection that sorts them in place (numpy's vectorised sort, on the CPU), the statistics in
float64 numpy on the (2N, k_tail) tail (tens of microseconds instead of torch's per-op dispatch), and
one fused autograd function, :class:`_WeinceSimCLR`, on the normalised views and the shortfalls 1 − s
(the row maximum of ℓ is known from the row's largest cosine, so no pass finds it). When the rows are
reduced by a mean or a sum, the fused function also forms the gradient in its forward, while its two
(2N, 2N) buffers are hot, and the backward only scales it (as ``dense_row_lse(grad_ahead=True)`` does
for NT-Xent); with ``reduction="none"`` it keeps E and 1 − s for a backward of three passes and two
GEMMs. A learnable τ or the auxiliary terms use the NT-Xent logits of ``nt_xent_logits`` with their
autograd graph and :class:`_MixedCrossEntropy` / plain autograd.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from scipy.special import expit
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
from contrastlab.losses.info_nce import info_nce
from contrastlab.losses.nt_xent import nt_xent, nt_xent_logits

__all__ = [
    "weince",
    "WEINCELoss",
    "WEINCEStats",
    "AnchorTailStats",
    "GlobalBetaConfig",
    "anchor_tail_stats",
    "global_tail_beta",
    "update_beta_ema",
    "tail_size",
    "rowwise_ols",
    "BETA_MODES",
]

BETA_MODES = ("per_anchor", "one", "global_ema")

#: The code adds this to the SSE of a fit whose slope has the wrong sign.
_WRONG_SIGN_SSE = 1e6


@functools.lru_cache(maxsize=16)
def _u_min(eps: float, dtype: torch.dtype) -> float:
    """1 − (1 − eps) as rounded in ``dtype``: the smallest shortfall 1 − s after the clamp s ≤ 1 − eps."""
    return 1.0 - torch.tensor(1.0 - eps, dtype=dtype).item()


@dataclass(frozen=True)
class GlobalBetaConfig:
    """The official code's batch-level Weibit shape β_t (``auto_weib_beta=True``), §2.3 last line.

    Used by ``beta_mode="global_ema"`` and by the top-M auxiliary Weibit term.
    """

    tail_frac: float = 0.05
    """fraction of all the batch's negative shortfalls in the global tail fit"""
    min_tail: int = 1024
    """minimum number of tail points of the global fit"""
    r2_min: float = 0.85
    """a batch's β̂ is accepted only when its fit has R² ≥ r2_min"""
    beta_min: float = 0.5
    """lower clamp of an accepted β̂"""
    beta_max: float = 16.0
    """upper clamp of an accepted β̂"""
    momentum: float = 0.9
    """EMA momentum: β_t ← momentum·β_{t−1} + (1 − momentum)·clamp(β̂)"""
    init: float = 4.0
    """β_0, the EMA's starting value (the code's ``weib_beta``)"""

    def __post_init__(self) -> None:
        if not 0.0 < check_positive_float("tail_frac", self.tail_frac) <= 1.0:
            raise ValueError(f"tail_frac must be in (0, 1], got {self.tail_frac}")
        _check_int("min_tail", self.min_tail, minimum=1)
        if not 0.0 <= check_positive_float("r2_min", self.r2_min, allow_zero=True) <= 1.0:
            raise ValueError(f"r2_min must be in [0, 1], got {self.r2_min}")
        check_positive_float("beta_min", self.beta_min)
        if check_positive_float("beta_max", self.beta_max) < self.beta_min:
            raise ValueError(f"beta_max must be >= beta_min = {self.beta_min}, got {self.beta_max}")
        if not 0.0 <= check_positive_float("momentum", self.momentum, allow_zero=True) < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        check_positive_float("init", self.init)


class AnchorTailStats(NamedTuple):
    """Per-anchor tail statistics of §2.3 (all detached). R is the number of anchors.

    Attributes:
        lam: λ_i ∈ [0, 1]. Shape ``(R,)``.
        beta_hat: Weibull slope β̂_i ≥ 0. Shape ``(R,)``.
        r2: R² of the Weibull fit, in [0, 1]. Shape ``(R,)``.
        delta_aic: ΔAIC_i = AIC_Gumbel − AIC_Weibull (> 0 favours Weibull). Shape ``(R,)``.
        rho: cap proximity ρ_i = max(1 − max_j s_ij⁻, eps). Shape ``(R,)``.
        rho0: the pivot ρ_0 (0-d).
        k_tail: the number of tail points per anchor.
        n_eff: the number of points in each OLS fit (k_tail − burn).
    """

    lam: Tensor
    beta_hat: Tensor
    r2: Tensor
    delta_aic: Tensor
    rho: Tensor
    rho0: Tensor
    k_tail: int
    n_eff: int


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


def _check_int(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def tail_size(k_neg: int, tail_frac: float, min_tail: int) -> int:
    """Per-anchor tail size k_tail, exactly as the official code computes it (§2.3 step 1).

    ``min(max(10, min(max(min_tail, round(tail_frac·K)), K)), K)``; Python's ``round`` (half to even)
    as in the code. For K = 2N − 2 = 510, tail_frac = 0.1, min_tail = 32 it is 51.
    """
    k = int(max(min_tail, round(tail_frac * k_neg)))
    k = min(k, k_neg)
    k = max(10, k)
    return min(k, k_neg)


def rowwise_ols(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form OLS of one response ``y`` on each row of ``x``, all rows at once.

    Fits y ≈ a_r + b_r·x_r for every row r, as the official code does: b = Σ x̃ỹ / max(Σ x̃², 1e-12)
    (x̃, ỹ centred), a = ȳ − b·x̄ and SSE = max(Σ (y − ŷ)², 1e-12).

    Shape:
        x: ``(R, n)``; y: ``(n,)`` (shared by every row) or ``(R, n)``.

    Returns:
        ``(slope, intercept, sse)``, each of shape ``(R,)``.
    """
    x_mean = x.mean(dim=-1, keepdim=True)  # (R, 1)
    y_mean = y.mean(dim=-1, keepdim=True)  # (1,) or (R, 1)
    xc = x - x_mean  # (R, n)
    yc = y - y_mean
    den = (xc * xc).sum(dim=-1).clamp_min(1e-12)
    slope = (xc * yc).sum(dim=-1) / den  # (R,)
    y_hat = slope.unsqueeze(-1) * xc + y_mean  # (R, n)
    sse = ((y - y_hat) ** 2).sum(dim=-1).clamp_min(1e-12)
    intercept = y_mean.squeeze(-1) - slope * x_mean.squeeze(-1)
    return slope, intercept, sse


@torch.no_grad()
def _top_values(x: Tensor, k: int, exclude: tuple[Tensor, ...] = (), *, inplace: bool = False) -> Tensor:
    """The k largest entries of each row of ``x``, sorted descending, without gradient.

    ``exclude`` holds column indices, one per row each (the row itself, its positive), left out.
    ``inplace=True`` lets the selection overwrite ``x`` (a CPU caller that no longer needs it saves the
    copy). On the CPU the selection runs in numpy on one masked copy (or on ``x`` itself): many rows
    are sorted whole (numpy's vectorised sort: 0.32 ms at (512, 512) against 0.50 ms for
    ``numpy.partition`` and 1.4 ms for ``torch.topk``, 2 threads, on the benchmark machine), a single
    long row (the global tail) is partitioned (introselect, O(C)) and only its k largest sorted;
    elsewhere it is ``torch.topk``.

    Shape:
        x: ``(R, C)``; each of exclude: ``(R,)``; returns ``(R, k)``.
    """
    x = x.detach()
    r, c = x.shape
    if x.device.type == "cpu":
        xn = x.numpy() if inplace else x.numpy().copy()  # masked and sorted in place below
        for cols in exclude:
            xn[np.arange(r), cols.numpy()] = -np.inf
        if r > 1:
            xn.sort(axis=1)
        else:
            xn.partition(c - k, axis=1)
            xn[:, c - k :].sort(axis=1)
        return torch.from_numpy(np.ascontiguousarray(xn[:, c - k :][:, ::-1]))
    if exclude:
        x = x.clone()
        for cols in exclude:
            x[torch.arange(r, device=x.device), cols] = float("-inf")
    return torch.topk(x, k=k, dim=1, largest=True, sorted=True).values


@functools.lru_cache(maxsize=64)
def _tail_design(k_tail: int, eps: float) -> tuple[np.ndarray, np.ndarray, int]:
    """The responses of the two tail fits, which depend only on k_tail.

    Returns ``[1, y_W − ȳ_W, y_G − ȳ_G]`` ``(n, 3)`` (float64: one GEMM with it gives each row's Σx and
    both centred cross products), the sums of squares Σ(y − ȳ)² ``(2,)`` and the burn-in.
    """
    burn = max(1, k_tail // 20)
    k = np.arange(burn + 1, k_tail + 1, dtype=np.float64)
    f_hat = np.maximum(k / (k_tail + 1.0), eps)  # empirical CDF of the shortfalls
    y = np.stack([np.log(f_hat), np.log(-np.log(f_hat))], axis=1)  # Weibull, Gumbel-fast proxy
    yc = y - y.mean(axis=0)
    design = np.concatenate([np.ones((len(k), 1)), yc], axis=1)
    design.setflags(write=False)  # cached: shared by every call
    s_yy = np.maximum((yc * yc).sum(axis=0), 1e-12)
    s_yy.setflags(write=False)
    return design, s_yy, burn


@torch.no_grad()
def _anchor_tail_stats(
    top: Tensor,
    *,
    q: float,
    kappa_rho: float,
    kappa_aic: float,
    margin: float,
    eps: float,
    rho_pool: Callable[[Tensor], Tensor] | None = None,
) -> AnchorTailStats:
    """§2.3 steps 1–4 from each anchor's k_tail largest negative cosines, in float64.

    The statistics are about thirty operations on an (R, k_tail) matrix (512 × 51 at SimCLR's batch),
    so they run in numpy on the host, where each costs microseconds (torch's per-op dispatch and thread
    hand-offs made them 0.4 ms of a 3 ms loss step on the benchmark machine); a GPU's top values are
    copied over once. The results are tensors on ``top``'s device.

    ``rho_pool`` (optional) maps these anchors' ρ ``(R,)`` to the ρ of every anchor of the batch whose
    q-quantile is the pivot ρ_0 (under torch.distributed: an all-gather over ranks, so that ρ_0 is the
    global batch's); by default the pivot is taken over these R anchors.

    Shape:
        top: ``(R, k_tail)``, each row descending.
    """
    device = top.device
    t = top.detach().cpu().numpy()
    r, k_tail = t.shape
    rho = np.maximum(np.subtract(1.0, t[:, 0], dtype=np.float64), eps)  # (R,)
    rho_all = rho if rho_pool is None else rho_pool(torch.from_numpy(rho).to(device)).cpu().numpy()
    # ρ_0: the order statistic of rank round(q (R − 1)) (0-based), as the code's sort-and-index.
    rank = int(round(q * (rho_all.shape[0] - 1)))
    rho0 = float(np.partition(rho_all, rank)[rank])
    lam_rho = expit(kappa_rho * (math.log(max(rho0, eps)) - np.log(rho)))

    def out(x: np.ndarray | float) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(device)

    burn = max(1, k_tail // 20)
    n_eff = k_tail - burn
    if n_eff < 2:  # K ≤ 2: no tail to fit
        zeros = np.zeros_like(rho)
        lam = lam_rho * (1.0 / (1.0 + math.exp(kappa_aic * margin)))
        return AnchorTailStats(out(lam), out(zeros), out(zeros), out(zeros), out(rho), out(rho0), k_tail, max(n_eff, 0))

    design, s_yy, burn = _tail_design(k_tail, eps)  # (n, 3), (2,)
    # Per-anchor OLS of y_W = log F̂ and y_G = log(−log F̂) on x = log δ (δ ascending), both at once,
    # from the sums S_xx, S_xy, S_yy: slope = S_xy/S_xx and SSE = S_yy − S_xy²/S_xx (the residuals'
    # sum of squares without forming them; in float64 the subtraction loses nothing the tests see).
    # One (R, n) float64 array, updated in place (fewer 200 KiB temporaries at 2N = 512).
    x = np.subtract(1.0, t[:, burn:], dtype=np.float64)
    np.maximum(x, eps, out=x)
    np.log(x, out=x)  # (R, n)
    sums = x @ design  # (R, 3): Σx, and Σ x (y − ȳ) for both fits (no need to centre x for those)
    # S_xx = Σx² − (Σx)²/n: x = log(1 − s) of one anchor's tail spans a few units, so in float64 the
    # subtraction keeps ~14 digits (the polyfit tests ask for 8).
    s_xx = np.maximum(np.einsum("ij,ij->i", x, x) - sums[:, 0] ** 2 / n_eff, 1e-12)[:, None]  # (R, 1)
    s_xy = sums[:, 1:]  # (R, 2)
    slope = s_xy / s_xx  # (R, 2): β̂ (Weibull), Gumbel slope
    sse = np.maximum(s_yy - s_xy * slope, 1e-12)  # (R, 2)
    r2 = np.clip(1.0 - sse[:, 0] / s_yy[0], 0.0, 1.0)
    sse[:, 0] += _WRONG_SIGN_SSE * (slope[:, 0] <= 0.0)
    sse[:, 1] += _WRONG_SIGN_SSE * (slope[:, 1] >= 0.0)
    aic = n_eff * np.log(sse / n_eff) + 4.0  # Gaussian-regression AIC, 2 parameters
    delta_aic = aic[:, 1] - aic[:, 0]  # AIC_G − AIC_W
    lam = lam_rho * expit(kappa_aic * (delta_aic - margin))
    beta_hat = np.maximum(slope[:, 0], 0.0)
    return AnchorTailStats(out(lam), out(beta_hat), out(r2), out(delta_aic), out(rho), out(rho0), k_tail, n_eff)


def anchor_tail_stats(
    neg_sims: Tensor,
    *,
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    margin: float = 2.0,
    eps: float = 1e-6,
) -> AnchorTailStats:
    """WEINCE's per-anchor tail statistics (§2.3 steps 1–4), vectorised over anchors, without gradient.

    Args:
        neg_sims: each anchor's negative cosine similarities. Shape ``(R, K)``. Entries equal to −inf
            are treated as excluded; every row must then hold at least as many finite entries as the
            row with the fewest (the tail size is computed from that count).
        q: quantile level of the cap-proximity pivot ρ_0, in [0, 1].
        tail_frac: fraction of the K negatives in each anchor's tail, in (0, 1].
        min_tail: minimum tail size (the code clips k_tail to [10, K] afterwards).
        kappa_rho: steepness κ_ρ ≥ 0 of the cap-proximity gate.
        kappa_aic: steepness κ_AIC ≥ 0 of the ΔAIC gate.
        margin: ΔAIC margin m.
        eps: floor of the shortfalls 1 − s, in (0, 1).

    Returns:
        :class:`AnchorTailStats`.

    Raises:
        TypeError, ValueError: invalid inputs, named in the message.
    """
    if not isinstance(neg_sims, Tensor):
        raise TypeError(f"neg_sims must be a torch.Tensor, got {type(neg_sims).__name__}")
    if not neg_sims.is_floating_point() or neg_sims.ndim != 2 or neg_sims.numel() == 0:
        raise ValueError(
            f"neg_sims must be a non-empty floating (R, K) tensor, got {neg_sims.dtype} {tuple(neg_sims.shape)}"
        )
    if bool(torch.isnan(neg_sims).any()) or bool((neg_sims == float("inf")).any()):
        raise ValueError("neg_sims contains NaN or +Inf entries")
    counts = torch.isfinite(neg_sims).sum(dim=1)
    k_neg = int(counts.min())
    if k_neg < 1:
        raise ValueError("neg_sims has a row without any finite negative similarity")
    _check_tail_options(q, tail_frac, min_tail, kappa_rho, kappa_aic, margin, eps)
    x = neg_sims if neg_sims.dtype == torch.float64 else neg_sims.float()
    top = _top_values(x, tail_size(k_neg, tail_frac, min_tail))
    return _anchor_tail_stats(top, q=q, kappa_rho=kappa_rho, kappa_aic=kappa_aic, margin=margin, eps=eps)


@torch.no_grad()
def global_tail_beta(
    neg_values: Tensor,
    *,
    tail_frac: float = 0.05,
    min_tail: int = 1024,
    eps: float = 1e-6,
    total: int | None = None,
) -> tuple[float, float] | None:
    """The official code's batch-level Weibit shape estimate (``_estimate_weib_beta_from_tail``).

    OLS of log F̂ on log δ over the k_tail = min(int(max(min_tail, tail_frac·K)), K) smallest
    shortfalls δ = max(1 − s, eps) of all K negative similarities, after dropping max(1, k_tail // 20)
    points.

    Args:
        neg_values: the negative similarities (any shape; finite entries are used). Shape ``(...)``.
        tail_frac: fraction of the negatives in the tail.
        min_tail: minimum tail size.
        eps: shortfall floor.
        total: the number K of negatives the tail size is computed from; default the number of finite
            entries of ``neg_values``. Under torch.distributed ``neg_values`` may hold only the union
            of every rank's k_tail largest values while K counts the global batch's negatives (the
            tail, and so the estimate, are then those of the global batch).

    Returns:
        ``(beta_hat, r2)`` with β̂ ≥ 0 and R² ∈ [0, 1], or ``None`` when fewer than 10 tail points
        (or fewer than 2 after the burn) exist.
    """
    vals = neg_values.detach().reshape(-1)
    vals = vals[torch.isfinite(vals)]
    if total is None:
        total = vals.numel()
    elif total < vals.numel():
        raise ValueError(f"total must be >= the number of finite neg_values ({vals.numel()}), got {total}")
    k_tail = min(int(max(min_tail, tail_frac * total)), total)
    if k_tail < 10:
        return None
    if k_tail > vals.numel():
        raise ValueError(f"neg_values must hold the k_tail = {k_tail} largest of the {total} negatives")
    tail = (1.0 - _top_values(vals.unsqueeze(0), k_tail)[0]).clamp_min(eps)  # the k_tail smallest, ascending
    k = torch.arange(1, k_tail + 1, dtype=tail.dtype, device=tail.device)
    burn = max(1, k_tail // 20)
    x = torch.log(tail)[burn:].unsqueeze(0)  # (1, n)
    y = torch.log(k / (k_tail + 1.0))[burn:]
    if x.shape[1] < 2:
        return None
    slope, _, sse = rowwise_ols(x, y)
    ss_tot = ((y - y.mean()) ** 2).sum().clamp_min(1e-12)
    r2 = (1.0 - sse / ss_tot).clamp(0.0, 1.0)
    return float(slope.clamp_min(0.0)), float(r2)


def update_beta_ema(beta_prev: float, estimate: tuple[float, float] | None, config: GlobalBetaConfig) -> float:
    """One EMA step of the global β_t (``_get_batch_beta``): a rejected or missing estimate keeps β_{t−1}.

    Args:
        beta_prev: β_{t−1}.
        estimate: ``(beta_hat, r2)`` from :func:`global_tail_beta`, or ``None``.
        config: the acceptance threshold, clamp and momentum.

    Returns:
        β_t.
    """
    if estimate is None:
        return beta_prev
    beta_hat, r2 = estimate
    if r2 >= config.r2_min and beta_hat > 0.0:
        clamped = min(config.beta_max, max(config.beta_min, beta_hat))
        return config.momentum * beta_prev + (1.0 - config.momentum) * clamped
    return beta_prev


def _check_tail_options(
    q: float, tail_frac: float, min_tail: int, kappa_rho: float, kappa_aic: float, margin: float, eps: float
) -> None:
    if not 0.0 <= check_positive_float("q", q, allow_zero=True) <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if not 0.0 < check_positive_float("tail_frac", tail_frac) <= 1.0:
        raise ValueError(f"tail_frac must be in (0, 1], got {tail_frac}")
    _check_int("min_tail", min_tail, minimum=1)
    check_positive_float("kappa_rho", kappa_rho, allow_zero=True)
    check_positive_float("kappa_aic", kappa_aic, allow_zero=True)
    _check_real("margin", margin)
    if not 0.0 < check_positive_float("eps", eps) < 1.0:
        raise ValueError(f"eps must be in (0, 1), got {eps}")


def _validate_inputs(z_a: Tensor, z_b: Tensor, negatives: Tensor | None) -> None:
    check_embeddings("z_a", z_a, ndim=2)
    check_embeddings("z_b", z_b, ndim=2)
    if z_b.shape != z_a.shape:
        raise ValueError(f"z_b must have the same shape as z_a {tuple(z_a.shape)}, got {tuple(z_b.shape)}")
    n, d = z_a.shape
    if negatives is None:
        if n < 2:
            raise ValueError(f"z_a must have N >= 2 rows: with N = {n} a view has no negatives to fit a tail to")
    else:
        if not isinstance(negatives, Tensor):
            raise TypeError(f"negatives must be None or a torch.Tensor, got {type(negatives).__name__}")
        if negatives.ndim not in (2, 3):
            raise ValueError(f"negatives must have shape (M, D) or (N, K, D), got {tuple(negatives.shape)}")
        check_embeddings("negatives", negatives, ndim=negatives.ndim)
        if negatives.shape[-1] != d:
            raise ValueError(f"negatives must have embedding dimension D = {d}, got {negatives.shape[-1]}")
        if negatives.ndim == 3 and negatives.shape[0] != n:
            raise ValueError(f"negatives of shape (N, K, D) must have N = {n} rows, got {negatives.shape[0]}")
    check_same_device(z_a=z_a, z_b=z_b, negatives=negatives)


def _weibit(cos: Tensor, eps: float) -> Tensor:
    """−log(1 − s) with s clamped to [−1, 1 − eps] (finite everywhere, also on masked −inf entries)."""
    return -torch.log1p(-cos.clamp(-1.0, 1.0 - eps))


def _mixed_cross_entropy_autograd(
    logits_pl: Tensor, pos_index: Tensor, lam: Tensor, lam_beta: Tensor, inv_t: Tensor | float, eps: float, square: bool
) -> Tensor:
    """Per-row −log softmax at ``pos_index`` of (1 − λ)·s/τ + λβ·(−log(1 − s)), with plain autograd ops.

    The reference for :class:`_MixedCrossEntropy`, and the path for a learnable temperature.
    """
    finite = logits_pl.masked_fill(torch.isinf(logits_pl), 0.0)  # no −inf/τ: its τ-gradient would be 0·inf
    logits = logits_pl * (1.0 - lam) + _weibit(finite / inv_t, eps) * lam_beta
    if square:  # λ_i = 1 turns the diagonal's 0·(−inf) into NaN: a view is never its own candidate
        rows = torch.arange(logits.shape[0], device=logits.device)
        logits = logits.index_put((rows, rows), torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device))
    return torch.logsumexp(logits, dim=1) - logits.gather(1, pos_index.unsqueeze(1)).squeeze(1)


class _MixedCrossEntropy(torch.autograd.Function):
    """Fused forward/backward of :func:`_mixed_cross_entropy_autograd` for a fixed temperature.

    The stop-gradient λ, λβ are constants, so ∂ℓ_ij/∂(s_ij/τ) = (1 − λ_i) + λ_i β_i τ/(1 − s_ij) (0 where s is
    clamped at 1 − eps). The forward computes the mixed logits with in-place ops and stores that
    derivative; the backward is softmax − one-hot times it: about a third of the passes over the (R, C)
    matrix that autograd makes. Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        logits_pl: Tensor,
        pos_index: Tensor,
        one_minus_lam: Tensor,
        lam_beta: Tensor,
        tau: float,
        eps: float,
        square: bool,
    ) -> Tensor:
        # u = 1 − s with s = τ·(s/τ) clamped to [−1, 1 − eps]; the −inf diagonal gives u = 2.
        u_min = _u_min(eps, logits_pl.dtype)
        u = torch.rsub(logits_pl, 1.0, alpha=tau).clamp_(u_min, 2.0)
        logits = torch.log(u).mul_(-lam_beta)  # λβ·(−log(1 − s))
        logits.addcmul_(logits_pl, one_minus_lam)  # + (1 − λ)·s/τ; exactly s/τ where λ = 0
        if square:
            logits.fill_diagonal_(float("-inf"))
        lse = torch.logsumexp(logits, dim=1)
        loss = lse - logits.gather(1, pos_index.unsqueeze(1)).squeeze(1)
        # d logits / d(s/τ) = (1 − λ) + λβτ/(1 − s), with 1/(1 − s) := 0 where s was clamped (u set to inf).
        torch.threshold_(u, u_min, float("inf"))
        d_pl = torch.addcdiv(one_minus_lam, lam_beta * tau, u)
        ctx.save_for_backward(logits, lse, d_pl, pos_index)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        logits, lse, d_pl, pos_index = ctx.saved_tensors
        if bool((grad > 0).all()):  # the usual case (mean/sum): fold the row weight into the exponent
            g = torch.sub(logits, (lse - torch.log(grad)).unsqueeze(1)).exp_()  # grad_i·softmax_i, (R, C)
        else:
            g = torch.sub(logits, lse.unsqueeze(1)).exp_().mul_(grad.unsqueeze(1))
        g.scatter_add_(1, pos_index.unsqueeze(1), -grad.unsqueeze(1))  # − grad_i·one-hot
        return g.mul_(d_pl), None, None, None, None, None, None


def _weince_rows(
    u: Tensor,
    pos_index: Tensor,
    a: Tensor,
    b: Tensor,
    s_max: Tensor,
    u_min: float,
    e_out: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """WEINCE's per-row loss over SimCLR's 2N views from the shortfalls ``u = 1 − s``; the fused forward.

    ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with s clamped to [−1, 1 − eps] inside the log (``u_min`` =
    1 − (1 − eps) as rounded), computed as ``a_i − a_i u_ij − b_i log(clamp(u_ij))``. a, b ≥ 0, so ℓ is
    increasing in s and the row maximum ``c`` is ℓ at the row's largest cosine ``s_max``: the shift
    needs no pass over the matrix. ``e_out`` (optional) receives ``E`` instead of a fresh allocation.

    Shape:
        u: ``(R, R)``; pos_index: ``(R,)``; a, b, s_max: ``(R, 1)``.

    Returns:
        ``(E, row_sum, loss)``: ``E = exp(ℓ − c)`` with 0 on the diagonal ``(R, R)``, its row sums
        ``(R, 1)`` and the per-row loss ``(R,)``.
    """
    c = a * s_max - b * torch.log(torch.rsub(s_max, 1.0).clamp_(u_min, 2.0))  # row maxima of ℓ, (R, 1)
    # −b·log(1 − s) + (a − c) − a·(1 − s). (Each op has one (R, 1) operand: TensorIterator vectorises
    # those; an addcmul with two broadcast operands runs ~4× slower here.)
    e = torch.clamp(u, u_min, 2.0, out=e_out).log_().mul_(-b).add_(a - c).addcmul_(u, -a)  # ℓ − c
    pos_shifted = e.gather(1, pos_index.unsqueeze(1))  # ℓ_pos − c, (R, 1)
    e.exp_().fill_diagonal_(0.0)  # a view is never its own candidate
    row_sum = e.sum(dim=1, keepdim=True)
    loss = (row_sum.log() - pos_shifted).squeeze(1)
    return e, row_sum, loss


def _mark_clamped(u: Tensor, s_max: Tensor, u_min: float) -> None:
    """Set ``u = 1 − s`` to +inf where s was clamped at 1 − eps (there b/u, the Weibit slope, is 0).

    The diagonal (a view against itself, s = 1) always is; when every row's largest off-diagonal cosine
    ``s_max`` is below the clamp, only the diagonal is touched instead of a pass over the matrix.
    """
    if float((1.0 - s_max).min()) > u_min:
        u.fill_diagonal_(float("inf"))
    else:
        torch.threshold_(u, u_min, float("inf"))


def _weince_grad(
    k: Tensor,
    e: Tensor,
    row_sum: Tensor,
    u: Tensor,
    pos_index: Tensor,
    a: Tensor,
    b: Tensor,
    grad: Tensor | None,
    *,
    inplace: bool,
) -> Tensor:
    """∂(Σ_i grad_i loss_i)/∂k from :func:`_weince_rows`' results (``grad=None``: all ones).

    ``G = diag(grad)(softmax − one-hot) ∘ dℓ/ds`` with dℓ/ds = a + b/u, ``u = 1 − s`` (+inf where s was
    clamped, so that b/u = 0 there), then ``∂k = G k + Gᵀ k`` (s = k kᵀ). The row factor
    grad_i/row_sum_i is folded into a and b, so G costs three passes; ``inplace`` writes them into ``u``
    and ``e``.
    """
    w = row_sum.reciprocal() if grad is None else grad.unsqueeze(1) / row_sum  # (R, 1)
    g_pos = (a + b / u.gather(1, pos_index.unsqueeze(1))) * (1.0 if grad is None else grad.unsqueeze(1))
    d = torch.div(b * w, u, out=u if inplace else None).add_(a * w)  # (a + b/u)·grad/row_sum
    g = e.mul_(d) if inplace else e * d  # grad_i · softmax_i ∘ dℓ/ds
    g.scatter_add_(1, pos_index.unsqueeze(1), -g_pos)  # − grad_i · one-hot(positive) ∘ dℓ/ds
    return torch.mm(g, k).addmm_(g.T, k)


class _WeinceSimCLR(torch.autograd.Function):
    """WEINCE over SimCLR's 2N views from the normalised views ``k`` and their shortfalls 1 − s, fused.

    Per row i: ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with a_i = (1 − λ_i)/τ, b_i = λ_i β_i (stop-gradient
    constants); :func:`_weince_rows` computes the loss. With ``grad_ahead`` (the caller reduces the rows
    by a mean or a sum, so every row gets the same upstream gradient) the forward also computes
    ``∂k`` for an all-ones upstream gradient in the buffers it already has, keeps only that (R, D)
    result and the backward scales it; an unequal upstream gradient is still exact (the backward then
    recomputes). Otherwise the forward keeps E, the row sums and 1 − s for a backward of three passes
    and two GEMMs. ``u`` (the caller's ``1 − s``) is overwritten; ``e_out`` (optional) receives E (see
    :func:`weince`: one allocation per step). Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        k: Tensor,
        u: Tensor,
        pos_index: Tensor,
        a: Tensor,
        b: Tensor,
        s_max: Tensor,
        eps: float,
        grad_ahead: bool,
        e_out: Tensor | None,
    ) -> Tensor:
        u_min = _u_min(eps, u.dtype)
        e, row_sum, loss = _weince_rows(u, pos_index, a, b, s_max, u_min, e_out)
        _mark_clamped(u, s_max, u_min)
        ctx.grad_ahead, ctx.u_min = grad_ahead, u_min
        if grad_ahead:
            dk = _weince_grad(k, e, row_sum, u, pos_index, a, b, None, inplace=True)
            ctx.save_for_backward(dk, k, pos_index, a, b, s_max)  # the work buffers are free again
        else:
            ctx.save_for_backward(k, e, row_sum, u, pos_index, a, b)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        if ctx.grad_ahead:
            dk, k, pos_index, a, b, s_max = ctx.saved_tensors
            if bool((grad == grad[0]).all()):  # the same for every row: scale the gradient made ahead
                return dk * grad[0], *(None,) * 8
            u = torch.rsub(k @ k.T, 1.0)  # unequal rows: recompute
            e, row_sum, _ = _weince_rows(u, pos_index, a, b, s_max, ctx.u_min)
            _mark_clamped(u, s_max, ctx.u_min)
            return _weince_grad(k, e, row_sum, u, pos_index, a, b, grad, inplace=True), *(None,) * 8
        k, e, row_sum, u, pos_index, a, b = ctx.saved_tensors
        return _weince_grad(k, e, row_sum, u, pos_index, a, b, grad, inplace=False), *(None,) * 8


def validate_weince_args(
    z_a: Tensor,
    z_b: Tensor,
    negatives: Tensor | None,
    *,
    beta_mode: str,
    reduction: str,
    tail_options: tuple[float, float, int, float, float, float, float],
    fixed_lambda: float | None,
    aux_top_m: int,
    aux_weight: float,
    global_beta: GlobalBetaConfig,
    beta_ema: float | Tensor | None,
    return_stats: bool,
) -> float:
    """Validate :func:`weince`'s arguments (shared with the gathered version) and return the previous β_t.

    ``tail_options`` is ``(q, tail_frac, min_tail, kappa_rho, kappa_aic, margin, eps)``.

    Raises:
        TypeError, ValueError: an invalid argument, named in the message.
    """
    _validate_inputs(z_a, z_b, negatives)
    check_choice("beta_mode", beta_mode, BETA_MODES)
    check_choice("reduction", reduction, REDUCTIONS)
    _check_tail_options(*tail_options)
    if (
        fixed_lambda is not None
        and not 0.0 <= check_positive_float("fixed_lambda", fixed_lambda, allow_zero=True) <= 1.0
    ):
        raise ValueError(f"fixed_lambda must be None or in [0, 1], got {fixed_lambda}")
    _check_int("aux_top_m", aux_top_m, minimum=0)
    check_positive_float("aux_weight", aux_weight, allow_zero=True)
    if not isinstance(global_beta, GlobalBetaConfig):
        raise TypeError(f"global_beta must be a GlobalBetaConfig, got {type(global_beta).__name__}")
    if beta_ema is None:
        beta_prev = global_beta.init
    elif isinstance(beta_ema, Tensor):
        if beta_ema.numel() != 1:
            raise ValueError(f"beta_ema must be a scalar, got a tensor of shape {tuple(beta_ema.shape)}")
        beta_prev = check_positive_float("beta_ema", float(beta_ema.detach()))
    else:
        beta_prev = check_positive_float("beta_ema", beta_ema)
    check_bool("return_stats", return_stats)
    return beta_prev


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
    global_beta: GlobalBetaConfig = GlobalBetaConfig(),
    beta_ema: float | Tensor | None = None,
    reduction: str = "mean",
    return_stats: bool = False,
    gather: bool = False,
) -> Tensor | tuple[Tensor, WEINCEStats]:
    """WEINCE loss (Erol et al. 2026, README formula; statistics as in the official code, §2.3).

    Args:
        z_a: first view's embeddings (anchors). Shape ``(N, D)``.
        z_b: second view's embeddings, row i the partner of ``z_a[i]``. Shape ``(N, D)``.
        negatives: ``None`` — SimCLR's 2N views (each view against the other 2N − 2, both directions,
            as NT-Xent); ``(M, D)`` — every anchor ``z_a[i]`` against its positive ``z_b[i]`` and the M
            shared negatives; ``(N, K, D)`` — against K negatives of its own. Rows are L2-normalised.
        temperature: τ > 0 of the softmax logit s/τ (float, 0-d tensor or ``LearnableTemperature``).
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
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per-anchor losses: ``(2N,)`` with the views of
            ``z_a`` first, or ``(N,)`` with explicit negatives).
        return_stats: also return :class:`WEINCEStats` (λ_i, β_i, ΔAIC_i, ..., the new β_t).
        gather: under torch.distributed, the single-process WEINCE of the global batch from this
            rank's rows (:func:`contrastlab.distributed.weince_gathered`: candidates gathered from every
            rank, every batch statistic over the global candidate set; the result is this rank's
            share of the global loss); a no-op in one process.

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
    if gather and distributed_world_size() > 1:
        from contrastlab.distributed import weince_gathered

        return weince_gathered(
            z_a,
            z_b,
            negatives,
            temperature=temperature,
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
            beta_ema=beta_ema,
            reduction=reduction,
            return_stats=return_stats,
        )
    beta_prev = validate_weince_args(
        z_a,
        z_b,
        negatives,
        beta_mode=beta_mode,
        reduction=reduction,
        tail_options=(q, tail_frac, min_tail, kappa_rho, kappa_aic, margin, eps),
        fixed_lambda=fixed_lambda,
        aux_top_m=aux_top_m,
        aux_weight=aux_weight,
        global_beta=global_beta,
        beta_ema=beta_ema,
        return_stats=return_stats,
    )

    dtype = compute_dtype(z_a, z_b, *(() if negatives is None else (negatives,)))
    device = z_a.device
    with torch.autocast(device_type=device.type, enabled=False):
        inv_t = resolve_inverse_temperature(temperature, dtype, device)
        a, b = z_a.to(dtype), z_b.to(dtype)
        fast = negatives is None and isinstance(inv_t, float) and aux_top_m == 0
        if negatives is None:
            # SimCLR's 2N views; row i's positive is column pos_index[i], its K = 2N − 2 negatives the others.
            n = a.shape[0]
            rows = torch.arange(2 * n, device=device)
            pos_index = torch.cat([rows[n:], rows[:n]])
            views = tiled.normalize_scale(torch.cat([a, b], dim=0))  # (2N, D), with gradient
            # The fused path keeps 1 − s and lets the tail selection sort the cosines in place; E is then
            # written over them: two (2N, 2N) buffers per step, in one allocation.
            work = views.new_empty(2, 2 * n, 2 * n) if fast else None
            with torch.no_grad():
                cos = torch.mm(views.detach(), views.detach().T, out=None if work is None else work[0])
                if work is not None:
                    s_pos = cos.gather(1, pos_index.unsqueeze(1))  # (2N, 1), read before the sort
                    one = torch.ones((), dtype=dtype, device=device)
                    u = torch.sub(one, cos, out=work[1])  # 1 − s
            k_neg = 2 * n - 2
            if not fast:  # the NT-Xent logits s/τ with their autograd graph, −inf on the diagonal
                logits_pl, _ = nt_xent_logits(a, b, inv_t)
        else:
            a, b = l2_normalize(a), l2_normalize(b)
            nv = l2_normalize(negatives.to(dtype))
            a_s = a * inv_t
            pos_pl = (a_s * b).sum(dim=1, keepdim=True)  # (N, 1)
            neg_pl = a_s @ nv.T if nv.ndim == 2 else torch.bmm(nv, a_s.unsqueeze(2)).squeeze(2)  # (N, K)
            logits_pl = torch.cat([pos_pl, neg_pl], dim=1)  # (N, 1 + K): the positive is column 0
            pos_index = torch.zeros(a.shape[0], dtype=torch.long, device=device)
            k_neg = neg_pl.shape[1]
        tau_det = 1.0 / inv_t if isinstance(inv_t, float) else float(1.0 / inv_t.detach())

        # §2.3 statistics on the k_tail hardest negatives; s/τ is increasing in s, so select on the logits.
        k_tail = tail_size(k_neg, tail_frac, min_tail)
        need_global = beta_mode == "global_ema" or aux_top_m > 0
        if negatives is None:
            in_place = work is not None and not need_global  # the global tail reads the cosines again
            top = _top_values(cos, k_tail, exclude=(rows, pos_index), inplace=in_place)
        else:
            top = _top_values(neg_pl, k_tail) * tau_det
        tail = _anchor_tail_stats(top, q=q, kappa_rho=kappa_rho, kappa_aic=kappa_aic, margin=margin, eps=eps)
        lam = tail.lam.to(dtype) if fixed_lambda is None else torch.full_like(tail.lam, fixed_lambda, dtype=dtype)

        beta_t: float | None = None
        estimate: tuple[float, float] | None = None
        neg_only: Tensor | None = None
        if need_global:
            with torch.no_grad():  # the negatives alone, −inf elsewhere
                if negatives is None:
                    neg_only = cos.clone()
                    neg_only[rows, rows] = float("-inf")
                else:
                    neg_only = logits_pl.detach() * tau_det
                neg_only[torch.arange(neg_only.shape[0], device=device), pos_index] = float("-inf")
            estimate = global_tail_beta(
                neg_only, tail_frac=global_beta.tail_frac, min_tail=global_beta.min_tail, eps=eps
            )
            beta_t = update_beta_ema(beta_prev, estimate, global_beta)
        if beta_mode == "per_anchor":
            beta = tail.beta_hat.to(dtype)
        elif beta_mode == "one":
            beta = torch.ones_like(lam)
        else:
            assert beta_t is not None
            beta = torch.full_like(lam, beta_t)

        lam_c, lam_beta = lam.unsqueeze(1), (lam * beta).unsqueeze(1)  # (R, 1): stop-gradient constants
        if not bool(lam.any()):  # λ ≡ 0: the loss is NT-Xent / InfoNCE; use their kernels (same numbers)
            if negatives is None:
                loss = nt_xent(z_a, z_b, temperature=temperature, reduction="none")
            else:
                loss = info_nce(z_a, z_b, negatives, temperature=temperature, reduction="none")
        elif fast:
            assert isinstance(inv_t, float)
            s_max = torch.maximum(top[:, :1].to(dtype), s_pos)  # (2N, 1)
            coef = (1.0 - lam_c) * inv_t
            assert work is not None
            if torch.is_grad_enabled() and views.requires_grad:
                ahead = not tiled.keeps_logits(reduction, views)  # a mean or sum: the gradient in the forward
                loss = _WeinceSimCLR.apply(views, u, pos_index, coef, lam_beta, s_max, eps, ahead, work[0])
            else:
                u_min = _u_min(eps, dtype)
                loss = _weince_rows(u, pos_index, coef, lam_beta, s_max, u_min, work[0])[2]
        elif isinstance(inv_t, float):
            loss = _MixedCrossEntropy.apply(
                logits_pl, pos_index, 1.0 - lam_c, lam_beta, tau_det, eps, negatives is None
            )
        else:  # a learnable τ: plain autograd (the Weibit term must not depend on τ through s/τ)
            loss = _mixed_cross_entropy_autograd(logits_pl, pos_index, lam_c, lam_beta, inv_t, eps, negatives is None)

        if aux_top_m > 0:
            assert beta_t is not None and neg_only is not None
            m = min(aux_top_m, k_neg)
            top_idx = torch.topk(neg_only, k=m, dim=1).indices  # (R, M) hardest negatives
            p_logits = torch.cat([logits_pl.gather(1, pos_index.unsqueeze(1)), logits_pl.gather(1, top_idx)], dim=1)
            w_logits = beta_t * _weibit(p_logits / inv_t, eps)  # (R, 1 + M): [positive | M hardest], with gradient
            aux = (torch.logsumexp(w_logits, dim=1) - w_logits[:, 0]) + (
                torch.logsumexp(p_logits, dim=1) - p_logits[:, 0]
            )
            loss = loss + aux_weight * aux

    out = check_finite_loss(reduce(loss, reduction), "z_a/z_b")
    if not return_stats:
        return out
    stats = WEINCEStats(
        tail=tail,
        beta=beta.detach(),
        beta_ema=None if beta_t is None else torch.tensor(beta_t, dtype=torch.float64),
        beta_global_hat=None if estimate is None else estimate[0],
        beta_global_r2=None if estimate is None else estimate[1],
    )
    return out, stats


class WEINCELoss(nn.Module):
    """Module form of :func:`weince`; hyperparameters are validated at construction.

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
        global_beta: GlobalBetaConfig = GlobalBetaConfig(),
        reduction: str = "mean",
        gather: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(temperature, (nn.Module, Tensor)):
            temperature = check_positive_float("temperature", temperature)
        self.temperature = temperature
        self.beta_mode = check_choice("beta_mode", beta_mode, BETA_MODES)
        _check_tail_options(q, tail_frac, min_tail, kappa_rho, kappa_aic, margin, eps)
        self.q, self.tail_frac, self.min_tail = float(q), float(tail_frac), min_tail
        self.kappa_rho, self.kappa_aic, self.margin, self.eps = (
            float(kappa_rho),
            float(kappa_aic),
            float(margin),
            float(eps),
        )
        if (
            fixed_lambda is not None
            and not 0.0 <= check_positive_float("fixed_lambda", fixed_lambda, allow_zero=True) <= 1.0
        ):
            raise ValueError(f"fixed_lambda must be None or in [0, 1], got {fixed_lambda}")
        self.fixed_lambda = fixed_lambda
        self.aux_top_m = _check_int("aux_top_m", aux_top_m, minimum=0)
        self.aux_weight = check_positive_float("aux_weight", aux_weight, allow_zero=True)
        if not isinstance(global_beta, GlobalBetaConfig):
            raise TypeError(f"global_beta must be a GlobalBetaConfig, got {type(global_beta).__name__}")
        self.global_beta = global_beta
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        check_bool("gather", gather)
        self.gather = gather  # under torch.distributed: weince_gathered (every rank's β_t state moves alike)
        self.register_buffer("beta_ema", torch.tensor(float(global_beta.init), dtype=torch.float64))
        self.last_stats: WEINCEStats | None = None

    def forward(self, z_a: Tensor, z_b: Tensor, negatives: Tensor | None = None) -> Tensor:
        """Compute the loss; see :func:`weince` for shapes. Updates ``beta_ema`` in training mode."""
        loss, stats = weince(
            z_a,
            z_b,
            negatives,
            temperature=self.temperature,
            beta_mode=self.beta_mode,
            q=self.q,
            tail_frac=self.tail_frac,
            min_tail=self.min_tail,
            kappa_rho=self.kappa_rho,
            kappa_aic=self.kappa_aic,
            margin=self.margin,
            eps=self.eps,
            fixed_lambda=self.fixed_lambda,
            aux_top_m=self.aux_top_m,
            aux_weight=self.aux_weight,
            global_beta=self.global_beta,
            beta_ema=self.beta_ema,
            reduction=self.reduction,
            return_stats=True,
            gather=self.gather,
        )
        if self.training and stats.beta_ema is not None:
            self.beta_ema.copy_(stats.beta_ema)
        self.last_stats = stats
        return loss

    def extra_repr(self) -> str:
        """Hyperparameters shown in ``repr``."""
        t = self.temperature if isinstance(self.temperature, float) else "learnable"
        return (
            f"temperature={t}, beta_mode={self.beta_mode!r}, q={self.q}, tail_frac={self.tail_frac}, "
            f"min_tail={self.min_tail}, kappa_rho={self.kappa_rho}, kappa_aic={self.kappa_aic}, "
            f"margin={self.margin}, aux_top_m={self.aux_top_m}"
        )
