"""Tiny end-to-end run of ``generalisation-vs-k``."""

from __future__ import annotations

import math
from pathlib import Path

from contrastlab.experiments import run_experiment
from contrastlab.experiments.generalisation_vs_k import Config


def test_generalisation_vs_k_tiny_run(tmp_path: Path) -> None:
    cfg = Config(n=32, ks=(1, 4), seeds=2, steps=4, batch=16, hidden=(8,), n_eval=256, eval_group_size=16)
    res = run_experiment("generalisation-vs-k", cfg, tmp_path)
    assert (tmp_path / "generalisation_vs_k.png").stat().st_size > 1000
    assert (tmp_path / "train" / "k4_s1" / "metrics.jsonl").exists()
    runs = res["tables"][1]["rows"]
    assert len(runs) == 4
    for _k, _seed, emp, pop, se, gap, radius, bt, c_phi, cx in runs:
        assert math.isclose(gap, pop - emp, abs_tol=1e-12)
        assert se > 0 and radius > 0 and bt > 0 and c_phi > 0 and cx > 0
