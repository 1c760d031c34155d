"""Extreme-value diagnostics of the negative-similarity tail of any encoder's embeddings.

WEINCE (Erol et al., ICML 2026, arXiv 2606.00262) argues that because cosine similarity is bounded by
1, the hardest negatives of an anchor are in the reverse-Weibull domain of attraction, not the Gumbel
domain that a softmax implicitly assumes. Two checks, on embeddings of shape ``(N, D)``:

* **Peaks over threshold** (the paper's notebook ``analyze_exceedances.ipynb``): pool the negative
  cosines, take the exceedances y = s − u over the threshold u = their ``threshold_quantile``-quantile
  (0.99 in the paper), and fit a generalised Pareto distribution GPD(ξ, σ) with
  ``scipy.stats.genpareto`` (location fixed at 0). ξ̂ < 0 is the Weibull domain, with finite right
  endpoint u − σ/ξ, which should be ≤ 1 for cosines; ξ = 0 (exponential) is the Gumbel domain, fitted
  too for a likelihood-ratio / AIC comparison. The paper reports ξ̂ = −0.39 on a trained encoder. For
  isotropic unit vectors in R^D the cosine density is ∝ (1 − t²)^{(D−3)/2}, so ξ = −2/(D − 1) (our
  derivation, §2.6 of the reference notes): near-Gumbel for large D.
* **Per-anchor Weibull vs Gumbel AIC**: WEINCE's own per-anchor tail fits (§2.3), from
  :func:`contrastlab.losses.weince.anchor_tail_stats`: ΔAIC_i > 0 favours the Weibull fit.

Negatives are every other sample (``labels=None``) or every sample of another class. The figure is a
GPD QQ plot of the exceedances, their histogram with the fitted densities, and the ΔAIC histogram
(one row per encoder when several are compared).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats as sps
from torch import Tensor

from contrastlab import figures
from contrastlab._checks import check_embeddings, check_labels, check_positive_float
from contrastlab.losses.weince import AnchorTailStats, anchor_tail_stats

__all__ = [
    "POTFit",
    "TailReport",
    "negative_cosines",
    "pot_fit",
    "qq_points",
    "tail_diagnostics",
    "plot_tail_diagnostics",
    "delta_aic_histogram",
    "DELTA_AIC_CLIP",
    "isotropic_xi",
    "NO_ENDPOINT",
]

NO_ENDPOINT = "none (ξ̂ ≥ 0)"
"""How a fit without a finite right endpoint (ξ̂ ≥ 0: the Gumbel or Fréchet domain) prints its endpoint."""


@dataclass(frozen=True)
class POTFit:
    """A generalised Pareto fit to the exceedances over a high threshold.

    Attributes:
        threshold: u.
        threshold_quantile: the quantile level that gave u.
        n: number of values.
        n_exceed: number of exceedances (values > u).
        xi: shape ξ̂ (scipy's ``c``); < 0 is the (reverse) Weibull domain.
        sigma: scale σ̂ > 0.
        endpoint: the fitted right endpoint u − σ/ξ for ξ < 0, ``inf`` otherwise (printed as
            :data:`NO_ENDPOINT`: :meth:`endpoint_text`, :meth:`endpoint_cell`).
        loglik: the GPD log-likelihood at the fit.
        sigma_exponential: the exponential (ξ = 0, Gumbel domain) scale, the mean excess.
        loglik_exponential: its log-likelihood.
        delta_aic: AIC_exponential − AIC_GPD (> 0 favours the GPD, i.e. ξ ≠ 0).
    """

    threshold: float
    threshold_quantile: float
    n: int
    n_exceed: int
    xi: float
    sigma: float
    endpoint: float
    loglik: float
    sigma_exponential: float
    loglik_exponential: float
    delta_aic: float

    def endpoint_text(self, digits: int = 3) -> str:
        """The endpoint as printed: ``u − σ/ξ`` to ``digits`` decimals for ξ̂ < 0, else :data:`NO_ENDPOINT`."""
        return f"{self.endpoint:.{digits}f}" if self.xi < 0 else NO_ENDPOINT

    def endpoint_cell(self) -> float | str:
        """The endpoint as a table cell: the number for ξ̂ < 0, else :data:`NO_ENDPOINT`."""
        return self.endpoint if self.xi < 0 else NO_ENDPOINT


@dataclass(frozen=True)
class TailReport:
    """The output of :func:`tail_diagnostics`.

    Attributes:
        pot: the POT fit of the pooled negative cosines.
        anchors: WEINCE's per-anchor statistics (β̂_i, ΔAIC_i, ρ_i, λ_i), shapes ``(R,)``.
        frac_weibull: fraction of anchors with ΔAIC_i > 0.
        xi_isotropic: −2/(D − 1), ξ of isotropic embeddings of the same dimension (``nan`` for D = 1).
        exceedances: the sorted exceedances y = s − u (for the plots). Shape ``(n_exceed,)``.
    """

    pot: POTFit
    anchors: AnchorTailStats
    frac_weibull: float
    xi_isotropic: float
    exceedances: np.ndarray


def isotropic_xi(dim: int) -> float:
    """ξ = −2/(D − 1) of the maximum cosine between isotropic unit vectors in R^D (D ≥ 2)."""
    return -2.0 / (dim - 1) if dim > 1 else float("nan")


def _as_tensor(name: str, x: object) -> Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    return check_embeddings(name, x, ndim=2)


def negative_cosines(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray | None = None,
    *,
    max_anchors: int | None = 2048,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Each anchor's negative cosine similarities, and the pooled negatives.

    Args:
        embeddings: the encoder's outputs (rows are L2-normalised here). Shape ``(N, D)``.
        labels: optional classes; then only pairs of different classes are negatives. Shape ``(N,)``.
        max_anchors: use at most this many anchors, drawn without replacement (``None``: all).
        seed: seed of the anchor draw.

    Returns:
        ``(per_anchor, pooled)``: ``per_anchor`` of shape ``(R, N)`` (float64) with −inf at the anchor
        itself and at same-class items; ``pooled`` the unordered negative pairs' cosines (all anchors:
        the strict upper triangle; a subsample of anchors: their rows, where a pair of two drawn
        anchors appears twice).

    Raises:
        TypeError, ValueError: invalid inputs, named in the message.
    """
    z = _as_tensor("embeddings", embeddings).detach().to(torch.float64).cpu()
    n = z.shape[0]
    if n < 2:
        raise ValueError(f"embeddings must have at least 2 rows, got {n}")
    if labels is not None:
        lab = torch.from_numpy(np.asarray(labels)) if not isinstance(labels, Tensor) else labels
        lab = check_labels("labels", lab, n).cpu()
    if max_anchors is not None and (
        isinstance(max_anchors, bool) or not isinstance(max_anchors, int) or max_anchors < 1
    ):
        raise ValueError(f"max_anchors must be None or a positive int, got {max_anchors!r}")
    z = torch.nn.functional.normalize(z, dim=1)
    if max_anchors is None or max_anchors >= n:
        rows = torch.arange(n)
    else:
        g = torch.Generator().manual_seed(seed)
        rows = torch.randperm(n, generator=g)[:max_anchors].sort().values
    sims = z[rows] @ z.T  # (R, N)
    excluded = rows.unsqueeze(1) == torch.arange(n).unsqueeze(0)
    if labels is not None:
        excluded |= lab[rows].unsqueeze(1) == lab.unsqueeze(0)
    per_anchor = sims.masked_fill(excluded, float("-inf"))
    if rows.numel() == n:
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        pooled = per_anchor[upper]
    else:
        pooled = per_anchor.reshape(-1)
    pooled = pooled[torch.isfinite(pooled)]
    if pooled.numel() == 0:
        raise ValueError("labels: every pair has the same class, so there are no negatives")
    return per_anchor.numpy(), pooled.numpy()


def pot_fit(values: np.ndarray | Tensor, *, threshold_quantile: float = 0.99, min_exceedances: int = 10) -> POTFit:
    """Peaks-over-threshold GPD fit (``scipy.stats.genpareto``, location 0) to ``values > u``.

    Args:
        values: similarities (finite entries are used). Shape ``(P,)`` or any.
        threshold_quantile: u is this quantile of ``values`` (0.99 in the paper).
        min_exceedances: fewer exceedances than this raise ``ValueError``.

    Returns:
        :class:`POTFit`.

    Raises:
        ValueError: bad quantile, or too few exceedances (named in the message).
    """
    x = values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values, dtype=np.float64)
    x = x.astype(np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if not 0.0 <= check_positive_float("threshold_quantile", threshold_quantile, allow_zero=True) < 1.0:
        raise ValueError(f"threshold_quantile must be in [0, 1), got {threshold_quantile}")
    u = float(np.quantile(x, threshold_quantile)) if x.size else float("nan")
    y = np.sort(x[x > u] - u)
    if y.size < min_exceedances:
        raise ValueError(
            f"values: only {y.size} exceedances above the {threshold_quantile} quantile (need {min_exceedances}); "
            "pass more values or a lower threshold_quantile"
        )
    xi, _, sigma = sps.genpareto.fit(y, floc=0.0)
    loglik = float(np.sum(sps.genpareto.logpdf(y, xi, loc=0.0, scale=sigma)))
    sigma_exp = float(y.mean())
    loglik_exp = float(-y.size * math.log(sigma_exp) - y.size)
    endpoint = u - sigma / xi if xi < 0 else float("inf")
    return POTFit(
        threshold=u,
        threshold_quantile=float(threshold_quantile),
        n=int(x.size),
        n_exceed=int(y.size),
        xi=float(xi),
        sigma=float(sigma),
        endpoint=float(endpoint),
        loglik=loglik,
        sigma_exponential=sigma_exp,
        loglik_exponential=loglik_exp,
        delta_aic=(2 * 1 - 2 * loglik_exp) - (2 * 2 - 2 * loglik),
    )


def qq_points(fit: POTFit, exceedances: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """QQ-plot coordinates of sorted exceedances against the fitted GPD and exponential quantiles.

    Plotting positions p_i = (i − 0.5)/n.

    Returns:
        ``(gpd_quantiles, exponential_quantiles, empirical)``, each of shape ``(n,)``.
    """
    y = np.sort(np.asarray(exceedances, dtype=np.float64))
    p = (np.arange(1, y.size + 1) - 0.5) / y.size
    return sps.genpareto.ppf(p, fit.xi, scale=fit.sigma), sps.expon.ppf(p, scale=fit.sigma_exponential), y


def tail_diagnostics(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray | None = None,
    *,
    threshold_quantile: float = 0.99,
    max_anchors: int | None = 2048,
    seed: int = 0,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    q: float = 0.2,
    margin: float = 2.0,
) -> TailReport:
    """POT fit of the pooled negative cosines plus WEINCE's per-anchor Weibull/Gumbel comparison.

    Args:
        embeddings: the encoder's outputs. Shape ``(N, D)``.
        labels: optional classes (same-class pairs are not negatives). Shape ``(N,)``.
        threshold_quantile: POT threshold quantile.
        max_anchors: at most this many anchors (a seeded draw).
        seed: seed of the anchor draw.
        tail_frac: per-anchor tail fraction (as the loss).
        min_tail: per-anchor minimum tail size.
        q: cap-proximity pivot quantile of λ_i.
        margin: ΔAIC margin of λ_i.

    Returns:
        :class:`TailReport`.
    """
    per_anchor, pooled = negative_cosines(embeddings, labels, max_anchors=max_anchors, seed=seed)
    pot = pot_fit(pooled, threshold_quantile=threshold_quantile)
    anchors = anchor_tail_stats(
        torch.from_numpy(per_anchor), tail_frac=tail_frac, min_tail=min_tail, q=q, margin=margin
    )
    u = pot.threshold
    exceed = np.sort(pooled[pooled > u] - u)
    dim = int(embeddings.shape[1])
    return TailReport(
        pot=pot,
        anchors=anchors,
        frac_weibull=float((anchors.delta_aic > 0).double().mean()),
        xi_isotropic=isotropic_xi(dim),
        exceedances=exceed,
    )


#: The per-anchor ΔAIC panel spans [−DELTA_AIC_CLIP, DELTA_AIC_CLIP]; anchors beyond it are drawn in its end bins.
DELTA_AIC_CLIP = 60.0


def delta_aic_histogram(ax: Any, delta_aic: np.ndarray, *, clip: float = DELTA_AIC_CLIP, bins: int = 40) -> np.ndarray:
    """Draw the per-anchor ΔAIC histogram on ``ax``: fixed bins over ``[−clip, clip]``, the clipped anchors marked.

    The bins are fixed, not fitted to the data: a sample whose anchors all lie beyond the clip (a trained
    text encoder's ΔAIC is often in the hundreds) would otherwise fall in one automatic bin 1/40 of a unit
    wide, invisible on the axis. Anchors beyond ``±clip`` are counted in the end bin on their side, which
    is drawn hatched in another colour and labelled with the number of anchors beyond the clip.

    Args:
        ax: a matplotlib ``Axes``.
        delta_aic: ΔAIC_i = AIC_Gumbel − AIC_Weibull per anchor. Shape ``(R,)``.
        clip: half-width of the drawn range (> 0).
        bins: number of equal bins over ``[−clip, clip]`` (≥ 2).

    Returns:
        The count in each bin, the clipped anchors included. Shape ``(bins,)``.

    Raises:
        ValueError: ``delta_aic`` holds a NaN, ``clip`` is not > 0 or ``bins`` < 2.
    """
    v = np.asarray(delta_aic, dtype=np.float64).reshape(-1)
    if np.isnan(v).any():
        raise ValueError("delta_aic must not hold NaN")
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip!r}")
    if bins < 2:
        raise ValueError(f"bins must be >= 2, got {bins!r}")
    edges = np.linspace(-clip, clip, bins + 1)
    counts, _ = np.histogram(np.clip(v, -clip, clip), bins=edges)
    bars = ax.bar(edges[:-1], counts, width=edges[1] - edges[0], align="edge", color="C2")
    top = max(int(counts.max(initial=0)), 1)
    beyond = ((int((v < -clip).sum()), bars[0], f"< -{clip:g}"), (int((v > clip).sum()), bars[-1], f"> +{clip:g}"))
    for n, bar, where in beyond:
        if n:
            bar.set_facecolor("C1")
            bar.set_hatch("//")
            left = bar is bars[0]
            x = bar.get_x() + (0.0 if left else bar.get_width())
            label = f"{n} anchor{'s' if n > 1 else ''} {where}"
            ax.text(x, bar.get_height() + 0.02 * top, label, ha="left" if left else "right", va="bottom", fontsize=8)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlim(-clip, clip)
    ax.set_ylim(0, 1.15 * top)
    return counts


#: The exceedance panel draws the fitted endpoint only within this many times the exceedances' own range; one
#: further out (ξ̂ just below 0 puts it far beyond any cosine) is named in the legend, and the axis keeps to the data.
ENDPOINT_REACH = 2.0


def plot_tail_diagnostics(report: TailReport | Mapping[str, TailReport], path: str | Path, *, title: str = "") -> Path:
    """Plot the tail diagnostics: one row of three panels per report.

    The panels: GPD QQ plot, exceedance histogram with the fitted densities on the exceedances' own range
    (the fitted endpoint drawn when within :data:`ENDPOINT_REACH` times that range), histogram of per-anchor ΔAIC.

    Args:
        report: from :func:`tail_diagnostics`, or several by name (one row each, e.g. one per loss).
        path: the PNG to write (atomically, dpi 100).
        title: the figure title.

    Returns:
        ``path`` as a ``Path``.
    """
    reports = {"": report} if isinstance(report, TailReport) else dict(report)
    if not reports:
        raise ValueError("report must be a TailReport or a non-empty mapping of them")
    height = 3.6 * len(reports) + (0.5 if title else 0.0)
    fig, axes = figures.subplots(len(reports), 3, figsize=(13, height), squeeze=False)
    for row, (name, rep) in zip(axes, reports.items(), strict=True):
        fit = rep.pot
        q_gpd, q_exp, emp = qq_points(fit, rep.exceedances)
        label = f"{name}: " if name else ""
        ax = row[0]
        ax.scatter(q_gpd, emp, s=5, label=f"GPD, xi = {fit.xi:.3f}")
        ax.scatter(q_exp, emp, s=5, alpha=0.5, label="exponential (xi = 0)")
        lim = max(float(emp.max()), float(q_gpd.max()))
        ax.plot([0, lim], [0, lim], "k--", lw=0.8)
        ax.set(xlabel="fitted quantile", ylabel="exceedance s - u", title=f"{label}QQ plot of exceedances")
        ax.legend(fontsize=8)

        ax = row[1]
        span = float(emp.max()) * 1.05  # the exceedances' own range: the densities are drawn on it alone
        ax.hist(rep.exceedances, bins=40, density=True, alpha=0.6, color="C7")
        grid = np.linspace(0, span, 200)
        ax.plot(grid, sps.genpareto.pdf(grid, fit.xi, scale=fit.sigma), label="GPD")
        ax.plot(grid, sps.expon.pdf(grid, scale=fit.sigma_exponential), label="exponential")
        reach = fit.endpoint - fit.threshold  # inf for ξ̂ ≥ 0
        if reach <= ENDPOINT_REACH * span:
            ax.axvline(reach, color="C3", ls=":", label=f"endpoint s = {fit.endpoint:.3f}")
            span = max(span, 1.05 * reach)
        elif math.isfinite(reach):  # ξ̂ just below 0: an endpoint far beyond the data, named but not drawn
            ax.plot([], [], " ", label=f"endpoint s = {fit.endpoint:.3g}, off the axis")
        ax.set_xlim(0, span)
        ax.set(
            xlabel=f"s - u  (u = {fit.threshold:.4f})",
            title=f"{fit.n_exceed} exceedances; GPD vs exp. dAIC = {fit.delta_aic:.0f}",
        )
        ax.legend(fontsize=8)

        ax = row[2]
        delta_aic_histogram(ax, rep.anchors.delta_aic.numpy())
        ax.set(
            xlabel=f"AIC_G - AIC_W per anchor, clipped at ±{DELTA_AIC_CLIP:g}\n(isotropic xi = {rep.xi_isotropic:.3f})",
            title=f"{label}{100 * rep.frac_weibull:.0f}% of anchors favour Weibull",
        )
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(
        left=0.06, right=0.98, bottom=0.7 / height, top=1 - (0.9 if title else 0.4) / height, wspace=0.28, hspace=0.6
    )
    out = Path(path)
    figures.save_png(fig, out, dpi=100)
    return out
