"""Tiny end-to-end run of ``k-gap`` through the runner, and the demo hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from contrastlab.experiments import run_experiment
from contrastlab.experiments.k_gap import Config, fit_slope, k_gap_figure
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
