"""The k-gap measurement and figure, shared by the k-gap experiment and the demo.

:func:`measure_k_gap` estimates, for one encoder, Whiteley's (2026, arXiv 2607.09405) gaps between the
InfoNCE risk R(φ; k, τ) and the population / empirical-search cross-entropies for every k (Props. 1–2,
eqs. 11–12) with :func:`contrastlab.theory.search_ce.k_gap_estimates`; :func:`plot_k_gap` draws them on
a log-log plot with the bounds; :func:`k_gap_figure` does both for any set of encoders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contrastlab import figures
from contrastlab.seeds import stream_generator
from contrastlab.theory.bounds import dcl_search_bound, prop1_bounds, prop2_bound
from contrastlab.theory.risk import Encoder
from contrastlab.theory.search_ce import k_gap_estimates
from contrastlab.theory.slope import fit_slope
from contrastlab.worlds.vmf_world import SphereWorld

__all__ = ["DEFAULT_KS", "fit_slope", "k_gap_figure", "measure_k_gap", "plot_k_gap"]

DEFAULT_KS = tuple(2**i for i in range(11))  # 1, 2, 4, …, 1024


def measure_k_gap(
    encoder: Encoder,
    world: SphereWorld,
    *,
    temperature: float,
    ks: Sequence[int] = DEFAULT_KS,
    n_groups: int = 256,
    group_size: int = 64,
    n_positives: int = 8,
    m_ref: int = 8192,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure every gap of the experiment for one encoder.

    Returns:
        ``{"ks": [...], name: {"mean": [...], "se": [...]}, "slopes": {...}}`` for the names of
        :func:`~contrastlab.theory.search_ce.k_gap_estimates`.
    """
    est = k_gap_estimates(
        encoder,
        world,
        ks,
        temperature=temperature,
        n_groups=n_groups,
        group_size=group_size,
        n_positives=n_positives,
        m_ref=m_ref,
        generator=stream_generator(seed, "k_gap_draws"),
    )
    kk = sorted(est)
    out: dict[str, Any] = {"ks": kk}
    for name in est[kk[0]]:
        out[name] = {"mean": [est[k][name].mean for k in kk], "se": [est[k][name].se for k in kk]}
    out["slopes"] = {
        name: fit_slope(kk, out[name]["mean"], out[name]["se"])
        for name in ("pop_minus_risk", "pop_minus_risk_dcl", "search_minus_risk", "search_minus_pop")
    }
    return out


def plot_k_gap(
    curves: dict[str, dict[str, Any]],
    path: str | Path,
    *,
    temperature: float,
    ratio_second_moment: float,
    title: str = "",
) -> list[dict[str, Any]]:
    """Draw the k-gap figure: |CE_pop − R|, |CE_search − R| and |CE_search − CE_pop| against k, with bounds.

    Each panel's y-axis spans the data (down to a third of the smallest value, up to 10³ times the
    largest in the panels with bounds, 3 times elsewhere); a bound above that is marked ▲ at the top
    and its range is written in the panel.

    Args:
        curves: ``{encoder label: measure_k_gap(...) result}``.
        path: PNG file to write (atomically).
        temperature: τ (for the bounds).
        ratio_second_moment: E[(dM/dπ)²] (for Prop. 2 / eq. 12).
        title: figure title.

    Returns:
        Per panel, ``{"ylim": (low, high), "off_scale": [names of the bounds drawn as ▲]}``.
    """
    fig, axes = figures.subplots(1, 3, figsize=(15, 4.6))
    layout: list[dict[str, Any]] = []
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    ks_all = sorted({k for c in curves.values() for k in c["ks"]})
    kb = np.array(ks_all, dtype=float)
    panels = [
        ("pop_minus_risk", "pop_minus_risk_dcl", "|population CE − R(φ; k, τ)|"),
        ("search_minus_risk", "search_minus_risk_dcl", "|search CE (m = k) − R(φ; k, τ)|"),
        ("search_minus_pop", None, "|search CE (m) − population CE|"),
    ]
    for ax, (name, dcl_name, label) in zip(axes, panels, strict=True):
        shown: list[np.ndarray] = []  # every plotted data value with its error bar: sets the y-range
        for c, (enc, cur) in zip(colors, curves.items(), strict=False):
            k = np.array(cur["ks"], dtype=float)
            m, s = np.abs(np.array(cur[name]["mean"])), np.array(cur[name]["se"])
            ax.errorbar(k, np.maximum(m, 1e-7), yerr=s, fmt="o-", color=c, ms=3.5, lw=1.2, capsize=2, label=enc)
            shown += [np.maximum(m, 1e-7), m + s]
            if dcl_name is not None:
                md = np.abs(np.array(cur[dcl_name]["mean"]))
                ax.plot(k, np.maximum(md, 1e-7), "x:", color=c, ms=4, lw=0.9, label=f"{enc} (DCL)")
                shown.append(np.maximum(md, 1e-7))
        bounds: list[tuple[str, str, list[float]]] = []  # (label, line style, values at ks_all)
        if name == "pop_minus_risk":
            env = [max(-prop1_bounds(k, temperature)[0], prop1_bounds(k, temperature)[1]) for k in ks_all]
            bounds += [
                ("Prop. 1 bound", "k--", env),
                ("(e^{2/τ}−1)²/(8k) (eq. 11)", "k:", [prop1_bounds(k, temperature)[1] for k in ks_all]),
            ]
        elif name == "search_minus_risk":
            bounds += [
                ("Prop. 2", "k--", [prop2_bound(k, temperature, ratio_second_moment) for k in ks_all]),
                ("eq. 12 (DCL)", "k:", [dcl_search_bound(k, temperature, ratio_second_moment) for k in ks_all]),
            ]
        ax.plot(kb, kb[0] / kb * 0.5, color="0.7", lw=0.8, label="∝ 1/k")
        # The y-range follows the data (three decades of headroom above it where bounds are drawn, so an
        # informative bound stays visible); a bound above it is drawn as ▲ at the top and named in the panel,
        # so a vacuous bound (Prop. 1 at τ = 0.05 is ~1e34 nats) cannot flatten the data.
        data = np.concatenate(shown)
        data = data[np.isfinite(data) & (data > 0)]
        headroom = 1e3 if bounds else 3.0
        lo, hi = (float(data.min()) / 3.0, float(data.max()) * headroom) if data.size else (1e-7, 1.0)
        off_scale: list[str] = []  # names of the bounds above the range
        notes: list[str] = []
        for blabel, style, values in bounds:
            v = np.array(values, dtype=float)
            lw = 1.3 if style == "k--" else 1.0
            ax.plot(kb, np.where(v <= hi, v, np.nan), style, lw=lw, label=blabel)
            over = ~(v <= hi)  # also catches inf (a bound beyond float range)
            if over.any():
                ax.plot(kb[over], np.full(int(over.sum()), hi / 1.8), "^", color="k", ms=5)
                finite = v[over & np.isfinite(v)]
                rng = f"{finite.min():.1e}–{finite.max():.1e}" if finite.size else "inf"
                off_scale.append(blabel)
                notes.append(f"▲ {blabel} off-scale: {rng} nats")
        if notes:
            ax.text(
                0.98,
                0.9,
                "\n".join(notes),
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize=7,
                bbox={"boxstyle": "round", "fc": "white", "ec": "0.6", "alpha": 0.9},
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        layout.append({"ylim": (lo, hi), "off_scale": off_scale})
        ax.set_xlabel("k (negatives) = m (corpus size)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
    axes[0].set_ylabel("gap (nats); error bars = 1 s.e.")
    axes[0].legend(fontsize=6.5, loc="best")
    axes[1].legend(fontsize=6.5, loc="best")
    axes[2].legend(fontsize=6.5, loc="best")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=110)
    return layout


def k_gap_figure(
    encoder: Encoder,
    world: SphereWorld,
    path: str | Path,
    *,
    temperature: float,
    ks: Sequence[int] = DEFAULT_KS,
    n_groups: int = 96,
    m_ref: int = 4096,
    label: str = "encoder",
    with_ground_truth: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure and plot the k-gap curves of one (trained) encoder, next to φ* for reference.

    This is the hook for the demo: pass the demo's trained encoder and its world.

    Args:
        encoder: callable ``(N, d_in) -> (N, D)`` (put ``nn.Module`` encoders in eval mode).
        world: the SphereWorld the encoder was trained on.
        path: PNG file to write.
        temperature: τ used in training.
        ks: the ks to measure.
        n_groups: groups of the paired estimator (96 takes seconds on a CPU).
        m_ref: reference sample per group.
        label: legend label of the encoder.
        with_ground_truth: also draw φ* = g⁻¹ (needs the world's inverse).
        seed: seed of the draws.

    Returns:
        ``{label: measure_k_gap(...) result, ...}``.
    """
    curves = {
        label: measure_k_gap(encoder, world, temperature=temperature, ks=ks, n_groups=n_groups, m_ref=m_ref, seed=seed)
    }
    if with_ground_truth:
        curves["φ* = g⁻¹"] = measure_k_gap(
            world.ground_truth_encoder(),
            world,
            temperature=temperature,
            ks=ks,
            n_groups=n_groups,
            m_ref=m_ref,
            seed=seed,
        )
    plot_k_gap(
        curves,
        path,
        temperature=temperature,
        ratio_second_moment=world.ratio_second_moment(),
        title=f"k-gap (d = {world.d}, κ = {world.kappa:.3g}, τ = {temperature:g})",
    )
    return curves
