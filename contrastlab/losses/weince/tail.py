"""WEINCE's stop-gradient tail statistics: per-anchor Weibull/Gumbel fits, λ_i, and the global β_t.

Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value Corrections for
InfoNCE", ICML 2026 (arXiv 2606.00262), §2.3, computed exactly as the official code does
(github.com/hsme98/weince, commit 49485f3, ``simclr/modules/nt_xent_hard_select.py``); see
:mod:`contrastlab.losses.weince.loss` for the loss they enter. Everything here runs without gradient.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from scipy.special import expit
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab.losses.weince.options import GlobalBetaConfig, WEINCEOptions

__all__ = [
    "AnchorTailStats",
    "ENDPOINT_SHORTFALL",
    "anchor_tail_stats",
    "global_tail_beta",
    "global_tail_beta_pooled",
    "rowwise_ols",
    "tail_size",
    "update_beta_ema",
]

#: The code adds this to the SSE of a fit whose slope has the wrong sign.
_WRONG_SIGN_SSE = 1e6

#: A row whose largest tail cosine s comes within this of the endpoint (1 − s < 1/4) has its
#: statistics computed from float64 cosines (float32 inputs only). Cosines of float32 rows normalised
#: and multiplied in float32 err by up to ~8e-7 absolutely at D = 128 (measured: 13 float32 ulps of 1,
#: mostly the GEMM's accumulation), so a shortfall u = 1 − s errs by up to 8e-7/u relatively, and so
#: does x = log u, the abscissa of every tail fit; near the endpoint that swamps the fits (ΔAIC, an
#: n·log SSE, is the most sensitive). Above 1/4 the error of x is ≤ 3.2e-6; below, those rows are
#: recomputed (a float64 GEMM of those rows only, so a batch far from the endpoint pays nothing).
ENDPOINT_SHORTFALL = 0.25


def _crowded_rows(top: Tensor, dtype: torch.dtype) -> Tensor:
    """Rows of ``top`` (``(R, k)``, descending cosines) within :data:`ENDPOINT_SHORTFALL` of s = 1.

    None for float64, whose cosines need no recomputation.
    """
    if dtype == torch.float64:
        return torch.zeros(0, dtype=torch.long, device=top.device)
    if top.device.type == "cpu":  # numpy: microseconds, where torch's comparison and nonzero cost tens
        return torch.from_numpy(np.flatnonzero(top[:, 0].numpy() > 1.0 - ENDPOINT_SHORTFALL))
    return torch.nonzero(top[:, 0] > 1.0 - ENDPOINT_SHORTFALL).squeeze(1)


def _refine_rows(top: Tensor, crowded: Tensor, top64: Tensor) -> Tensor:
    """``top`` in float64 with the rows ``crowded`` replaced by their float64 recomputation ``top64``."""
    out = top.to(torch.float64)
    out[crowded] = top64.to(out.device)
    return out


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


#: Rows of at least this many columns are partitioned before their k largest entries are sorted
#: (:func:`_top_values`); shorter ones are sorted whole. Measured on the benchmark machine (k = C/10):
#: whole sort against partition + sort, 0.29 against 0.53 ms at (512, 512), 2.1 against 1.8 ms at
#: (1024, 1024), 9.9 against 6.5 ms at (2048, 2048).
_PARTITION_MIN_COLS = 1024


@torch.no_grad()
def _top_values(x: Tensor, k: int, exclude: tuple[Tensor, ...] = (), *, inplace: bool = False) -> Tensor:
    """The k largest entries of each row of ``x``, sorted descending, without gradient.

    ``exclude`` holds column indices, one per row each (the row itself, its positive), left out.
    ``inplace=True`` lets the selection overwrite ``x`` (a CPU caller that no longer needs it saves the
    copy). On the CPU the selection runs in numpy on one masked copy (or on ``x`` itself): rows shorter
    than :data:`_PARTITION_MIN_COLS` are sorted whole (numpy's vectorised sort: 0.29 ms at (512, 512)
    against 0.53 ms for ``numpy.partition`` plus a sort of the k largest, and 1.4 ms for
    ``torch.topk``, on the benchmark machine); longer rows (and a single row: the global tail) are
    partitioned (introselect, O(C)) and only their k largest sorted (at (4096, 4096), k = 409: 28 ms
    against 59 ms for the whole sort); elsewhere it is ``torch.topk``.

    Shape:
        x: ``(R, C)``; each of exclude: ``(R,)``; returns ``(R, k)``.
    """
    x = x.detach()
    r, c = x.shape
    if x.device.type == "cpu":
        xn = x.numpy() if inplace else x.numpy().copy()  # masked and sorted in place below
        for cols in exclude:
            xn[np.arange(r), cols.numpy()] = -np.inf
        if r > 1 and c < _PARTITION_MIN_COLS:
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


class _TailFits(NamedTuple):
    """Each anchor's own §2.3 fits (float64 numpy, shape ``(R,)`` each): no batch-level quantity enters."""

    beta_hat: np.ndarray
    r2: np.ndarray
    delta_aic: np.ndarray
    rho: np.ndarray


def _tail_fits(top: Tensor, eps: float) -> _TailFits:
    """§2.3 steps 1–3 of each anchor from its k_tail largest negative cosines (``(R, k_tail)``, rows descending).

    Every output row depends on its input row only, so anchors may be fitted in any grouping (the streamed
    kernel fits each block of anchors as soon as their tails are known) and concatenated.
    """
    t = top.detach().cpu().numpy()
    r, k_tail = t.shape
    u_first = np.subtract(1.0, t[:, 0], dtype=np.float64)  # each anchor's smallest shortfall, (R,)
    rho = np.maximum(u_first, eps)
    burn = max(1, k_tail // 20)
    n_eff = k_tail - burn
    if n_eff < 2:  # K ≤ 2: no tail to fit
        zeros = np.zeros_like(rho)
        return _TailFits(zeros, zeros, zeros, rho)

    design, s_yy, burn = _tail_design(k_tail, eps)  # (n, 3), (2,)
    # Per-anchor OLS of y_W = log F̂ and y_G = log(−log F̂) on x = log δ (δ ascending), both at once,
    # from the sums S_xx, S_xy, S_yy: slope = S_xy/S_xx and SSE = S_yy − S_xy²/S_xx (the residuals'
    # sum of squares without forming them; in float64 the subtraction loses nothing the tests see).
    # One (R, n) float64 array, updated in place (fewer 200 KiB temporaries at 2N = 512).
    x = np.subtract(1.0, t[:, burn:], dtype=np.float64)
    if u_first.min() < eps:  # rows descend, so no shortfall of a row is below its first
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
    return _TailFits(np.maximum(slope[:, 0], 0.0), r2, delta_aic, rho)


def _concat_fits(parts: list[_TailFits]) -> _TailFits:
    """The fits of consecutive groups of anchors, as one :class:`_TailFits`."""
    return _TailFits(*(np.concatenate(cols) for cols in zip(*parts, strict=True)))


@torch.no_grad()
def _tail_gates(
    fits: _TailFits,
    k_tail: int,
    device: torch.device,
    options: WEINCEOptions,
    rho_pool: Callable[[Tensor], Tensor] | None = None,
) -> AnchorTailStats:
    """§2.3 step 4: the pivot ρ_0 over the batch and λ_i, from every anchor's fits; tensors on ``device``.

    ``options`` gives q, κ_ρ, κ_AIC, the margin m and eps; ``rho_pool`` as in :func:`_anchor_tail_stats`.
    """
    q, kappa_rho, kappa_aic, margin, eps = options.q, options.kappa_rho, options.kappa_aic, options.margin, options.eps
    rho = fits.rho
    rho_all = rho if rho_pool is None else rho_pool(torch.from_numpy(rho).to(device)).cpu().numpy()
    # ρ_0: the order statistic of rank round(q (R − 1)) (0-based), as the code's sort-and-index.
    rank = int(round(q * (rho_all.shape[0] - 1)))
    rho0 = float(np.partition(rho_all, rank)[rank])
    lam_rho = expit(kappa_rho * (math.log(max(rho0, eps)) - np.log(rho)))

    def out(x: np.ndarray | float) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(device)

    n_eff = k_tail - max(1, k_tail // 20)
    if n_eff < 2:  # K ≤ 2: no tail was fitted (ΔAIC = 0)
        lam = lam_rho * (1.0 / (1.0 + math.exp(kappa_aic * margin)))
    else:
        lam = lam_rho * expit(kappa_aic * (fits.delta_aic - margin))
    return AnchorTailStats(
        out(lam), out(fits.beta_hat), out(fits.r2), out(fits.delta_aic), out(rho), out(rho0), k_tail, max(n_eff, 0)
    )


@torch.no_grad()
def _anchor_tail_stats(
    top: Tensor, options: WEINCEOptions, rho_pool: Callable[[Tensor], Tensor] | None = None
) -> AnchorTailStats:
    """§2.3 steps 1–4 from each anchor's k_tail largest negative cosines, in float64.

    The statistics are about thirty operations on an (R, k_tail) matrix (512 × 51 at SimCLR's batch),
    so they run in numpy on the host, where each costs microseconds (torch's per-op dispatch and thread
    hand-offs made them 0.4 ms of a 3 ms loss step on the benchmark machine); a GPU's top values are
    copied over once. The results are tensors on ``top``'s device: :func:`_tail_fits` (each anchor's
    own fits), then :func:`_tail_gates` (the batch's pivot and λ).

    ``rho_pool`` (optional) maps these anchors' ρ ``(R,)`` to the ρ of every anchor of the batch whose
    q-quantile is the pivot ρ_0 (under torch.distributed: an all-gather over ranks, so that ρ_0 is the
    global batch's); by default the pivot is taken over these R anchors.

    Shape:
        top: ``(R, k_tail)``, each row descending.
    """
    return _tail_gates(_tail_fits(top, options.eps), top.shape[1], top.device, options, rho_pool)


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
    options = WEINCEOptions(
        q=q, tail_frac=tail_frac, min_tail=min_tail, kappa_rho=kappa_rho, kappa_aic=kappa_aic, margin=margin, eps=eps
    )
    x = neg_sims if neg_sims.dtype == torch.float64 else neg_sims.float()
    return _anchor_tail_stats(_top_values(x, tail_size(k_neg, tail_frac, min_tail)), options)


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


@torch.no_grad()
def global_tail_beta_pooled(
    neg_values: Tensor, *, tail_frac: float = 0.05, min_tail: int = 1024, eps: float = 1e-6, gather: bool = False
) -> tuple[float, float] | None:
    """:func:`global_tail_beta` of the union of every rank's ``neg_values`` (with ``gather``).

    Each rank selects its ``k_tail`` largest finite values (k_tail computed from the global count),
    the selections are all-gathered (no gradient) and every rank fits the same pooled tail, which
    holds the global k_tail largest values. Without ``gather`` (or in one process) it is
    ``global_tail_beta(neg_values)``.

    Shape:
        neg_values: any shape; non-finite entries (masked self/positive columns) are ignored.
    """
    if not gather or cd.world_size() == 1:
        return global_tail_beta(neg_values, tail_frac=tail_frac, min_tail=min_tail, eps=eps)
    vals = neg_values.detach().reshape(-1)
    vals = vals[torch.isfinite(vals)]
    total = sum(cd.all_sizes(vals.numel(), vals.device))
    k_tail = min(int(max(min_tail, tail_frac * total)), total)
    local_top = torch.topk(vals, k=min(k_tail, vals.numel()), sorted=False).values
    pool = cd.gather_no_grad(local_top)
    return global_tail_beta(pool, tail_frac=tail_frac, min_tail=min_tail, eps=eps, total=total)


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
