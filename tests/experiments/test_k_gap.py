"""Tiny end-to-end run of ``k-gap`` through the runner, and the demo hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from contrastlab.experiments import run_experiment
from contrastlab.experiments.k_gap import Config, fit_slope, k_gap_figure, plot_k_gap
from contrastlab.models import MLP
from contrastlab.worlds.vmf_world import SphereWorld


def test_k_gap_tiny_run(tmp_path: Path) -> None:
    cfg = Config(
        k_max=16, n_groups=8, group_size=16, n_positives=2, m_ref=256, train_steps=5, train_batch=16, train_k=4
    )
    res = run_experiment("k-gap", cfg, tmp_path)
    assert (tmp_path / "k_gap.png").stat().st_size > 1000
    assert (tmp_path / "train" / "metrics.jsonl").exists()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["metrics"]["ground_truth_ce_closed_form"] == pytest.approx(-0.1516, abs=1e-4)
    rows = res["tables"][0]["rows"]
    assert len(rows) == 3 * 5 and all(len(r) == len(res["tables"][0]["columns"]) for r in rows)
    assert res["metrics"]["bound_violations_4se"] == 0


def test_fit_slope_recovers_power_law() -> None:
    ks = [1, 2, 4, 8, 16, 32, 64]
    s = fit_slope(ks, [-3.0 / k for k in ks], [1e-6] * len(ks))
    assert s["slope"] == pytest.approx(-1.0, abs=1e-9) and s["n_points"] == 4
    assert fit_slope(ks, [1e-3] * 7, [1.0] * 7)["slope"] is None  # nothing resolved above noise


def test_k_gap_figure_hook(tmp_path: Path) -> None:
    world = SphereWorld(d=3, kappa=2.0, seed=0)
    torch.manual_seed(0)
    enc = MLP(3, [8], 4).eval()
    curves = k_gap_figure(enc, world, tmp_path / "kg.png", temperature=0.5, ks=[1, 4, 16], n_groups=4, m_ref=128)
    assert set(curves) == {"encoder", "φ* = g⁻¹"}
    assert (tmp_path / "kg.png").stat().st_size > 1000


def test_plot_keeps_the_data_readable_when_a_bound_is_vacuous(tmp_path: Path) -> None:
    # At τ = 0.05 Prop. 1's upper bound (e^{2/τ} − 1)²/(8k) is ~1e34 nats: the axis must follow the data
    # (here gaps of 0.01–1 nats) and flag the bound instead of drawing it.
    ks = [1, 4, 16]
    gaps = {"mean": [1.0, 0.1, 0.01], "se": [0.01, 0.01, 0.001]}
    names = ("pop_minus_risk", "pop_minus_risk_dcl", "search_minus_risk", "search_minus_risk_dcl", "search_minus_pop")
    curves = {"enc": {"ks": ks, **{n: gaps for n in names}}}
    layout = plot_k_gap(curves, tmp_path / "kg.png", temperature=0.05, ratio_second_moment=20.0)
    assert (tmp_path / "kg.png").stat().st_size > 1000
    top = max(m + s for m, s in zip(gaps["mean"], gaps["se"], strict=True))
    for panel in layout:
        lo, hi = panel["ylim"]
        assert lo <= min(gaps["mean"]) / 3 * (1 + 1e-12) and hi <= 1e3 * top * (1 + 1e-12)
    assert set(layout[0]["off_scale"]) == {"Prop. 1 bound", "(e^{2/τ}−1)²/(8k) (eq. 11)"}
    # Prop. 2 at τ = 0.05, k = 1 is 4·20/0.05 + log(1 + e^40) ≈ 1640 nats: above 10³ × 1.01, so flagged too
    assert "Prop. 2" in layout[1]["off_scale"] and layout[2]["off_scale"] == []
    # at τ = 1 the bounds are informative (Prop. 1 at k = 1: (e² − 1)²/8 ≈ 5.1 nats) and stay on the plot
    assert plot_k_gap(curves, tmp_path / "kg1.png", temperature=1.0, ratio_second_moment=2.0)[0]["off_scale"] == []
