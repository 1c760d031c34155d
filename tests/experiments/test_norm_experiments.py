"""Tiny runs of ``norm-dynamics`` and ``norm-calibration``: the contract shape and the exact recursion."""

from __future__ import annotations

import json
import math
from pathlib import Path

from contrastlab.experiments import norm_calibration, norm_dynamics


def _check_shape(res: dict, out: Path) -> None:
    assert set(res) == {"summary", "metrics", "tables", "figures"}
    assert isinstance(res["summary"], str) and len(res["summary"]) > 100
    assert all(isinstance(v, float) for v in res["metrics"].values())
    for t in res["tables"]:
        assert all(len(row) == len(t["columns"]) for row in t["rows"])
    for f in res["figures"]:
        assert (out / f["file"]).stat().st_size > 1000
    json.dumps(res)  # JSON-serialisable (NaN aside)


def test_norm_dynamics_tiny_run_is_exact_for_sgd(tmp_path: Path) -> None:
    cfg = norm_dynamics.Config(branching=2, depth=2, steps=30, batch_size=16, hidden=16, n_boot=20, record_every=5)
    res = norm_dynamics.run(cfg, tmp_path)
    _check_shape(res, tmp_path)
    m = res["metrics"]
    assert m["free_sgd/recursion_one_step_max"] < 1e-13  # float64 table: R1 holds to rounding
    assert m["free_sgd_wd/recursion_one_step_max"] < 1e-13
    assert m["mlp_sgd/recursion_one_step_max"] < 1e-5  # float32 last layer
    assert m["free_adam/recursion_final_rel_err_median"] > 1e-3  # Adam is not described by R1
    assert -1 <= m["free_sgd/spearman_heat"] <= 1
    assert len(res["tables"][0]["rows"]) == 8
    assert (tmp_path / "train_free_sgd" / "metrics.jsonl").exists()


def test_norm_calibration_tiny_run(tmp_path: Path) -> None:
    cfg = norm_calibration.Config(
        concept_steps=20, digits_steps=20, hidden=16, dim=8, concept_queries_per_item=4, digits_batch=64, digits_width=4
    )
    res = norm_calibration.run(cfg, tmp_path)
    _check_shape(res, tmp_path)
    rows = res["tables"][0]["rows"]
    assert {r[0] for r in rows} == {"concept world", "digits (clean queries)", "digits (corrupted queries)"}
    for r in rows:
        assert math.isnan(r[2]) or 0 <= r[2] <= 1
        assert 0 <= r[4] <= 1
