"""Tiny end-to-end run of ``continuity-bound``."""

from __future__ import annotations

import math
from pathlib import Path

from contrastlab.experiments import run_experiment
from contrastlab.experiments.continuity_bound import Config


def test_continuity_bound_tiny_run(tmp_path: Path) -> None:
    cfg = Config(n_pairs=6, n_tuples=16, k=4, betas=(1.0, 2.0, math.inf), hidden=(8,))
    res = run_experiment("continuity-bound", cfg, tmp_path)
    assert (tmp_path / "continuity_bound.png").stat().st_size > 1000
    m = res["metrics"]
    assert m["violations"] == 0
    assert m["comparisons"] == 6 * 16 * 4  # β = 2/τ = 4 is added to the three given
    assert 0 < m["max_ratio"] <= 1
