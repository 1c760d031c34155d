"""The audit's own figures (the tail figure is :func:`contrastlab.eval.tails.plot_tail_diagnostics`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from contrastlab.io import atomic_path

__all__ = ["plot_search", "plot_norms"]


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path


def plot_search(
    curve: list[tuple[float, float]], tau_star: float, risk: dict[str, Any], path: Path, *, title: str
) -> Path:
    """Left: held-out cross-entropy against τ with τ* marked. Right: |R(φ; k) − R(φ; ∞)| against k, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
    taus, ces = zip(*curve, strict=True)
    ax0.plot(taus, ces, "o-", ms=3)
    ax0.axvline(tau_star, color="C3", ls=":", label=f"tau* = {tau_star:.4f}")
    ax0.set(xscale="log", xlabel="temperature tau", ylabel="-log P(document | query), valid queries")
    ax0.set_title("softmax search: held-out pair cross-entropy")
    ax0.legend(fontsize=8)
    ks = np.asarray(risk["ks"], dtype=np.float64)
    gap = np.abs(np.asarray(risk["gap"]["mean"]))  # R(k) < R(inf) by Jensen's inequality: plot |gap|
    se = np.asarray(risk["gap"]["se"])
    pos = gap > 0
    ax1.errorbar(ks[pos], gap[pos], yerr=2 * se[pos], fmt="o-", ms=3, label="|R(k) - R(inf)|, ± 2 s.e.")
    slope = risk["slope"]
    if pos.any():
        ref = gap[pos][0] * ks[pos][0] / ks
        ax1.plot(ks, ref, "k--", lw=0.8, label="slope -1 (O(1/k))")
    fitted = "n/a" if slope["slope"] is None else f"{slope['slope']:.2f} ± {slope['slope_se']:.2f}"
    ax1.set(xscale="log", yscale="log", xlabel="negatives k", ylabel="|risk gap| (nats)")
    ax1.set_title(f"InfoNCE risk vs k at tau = {risk['temperature']:g}: fitted slope {fitted}")
    ax1.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_norms(norms: np.ndarray, frequency: np.ndarray | None, correct: np.ndarray, path: Path, *, title: str) -> Path:
    """Left: norm against mean word frequency (if texts). Right: norm histograms of right and wrong top-1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
    if frequency is not None:
        keep = np.isfinite(frequency)
        ax0.scatter(frequency[keep], norms[keep], s=4, alpha=0.5)
        ax0.set(xlabel="mean Zipf frequency of the query's words (wordfreq)", ylabel="pre-normalisation norm")
        ax0.set_title("norm vs word frequency")
    else:
        ax0.text(0.5, 0.5, "no texts: frequency not available", ha="center", va="center")
        ax0.set_axis_off()
    bins = np.linspace(float(norms.min()), float(norms.max()) + 1e-9, 40)
    for value, label in ((1, "top-1 right"), (0, "top-1 wrong")):
        if (correct == value).any():  # a density of no values is undefined
            ax1.hist(norms[correct == value], bins=bins, alpha=0.6, density=True, label=label)
    ax1.set(xlabel="pre-normalisation norm of the query", ylabel="density")
    ax1.set_title("norm as a retrieval confidence")
    ax1.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)
