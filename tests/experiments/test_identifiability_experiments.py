"""Tiny end-to-end runs of the identifiability experiments (contract shape, files, determinism)."""

from dataclasses import replace
from pathlib import Path

import pytest

from contrastlab.experiments import (
    constraint_ratio,
    get_experiment,
    identifiability_table,
    image_identifiability,
    list_experiments,
    progressive_violation,
    validate_results,
)
from contrastlab.experiments._latent_cl import LatentRun, train_latent


def test_registered() -> None:
    names = set(list_experiments())
    for n in ("identifiability-table", "progressive-violation", "constraint-ratio", "image-identifiability"):
        assert n in names
        get_experiment(n)


def test_identifiability_table_tiny(tmp_path: Path) -> None:
    cfg = replace(
        identifiability_table.QUICK,
        generators=("identity",),
        steps=3,
        batch_size=16,
        n_negatives=16,
        corrected_batch_size=8,
        corrected_negatives=4,
        hidden=(8,),
        n_test=64,
        seeds=2,
    )
    res = validate_results(identifiability_table.run(cfg, tmp_path), tmp_path)
    assert len(res["tables"][0]["rows"]) == 1
    assert res["tables"][0]["rows"][0][2] == "1.00"  # the paper's Identity/holds entry sits next to ours
    assert (tmp_path / "identifiability_table.png").exists()
    assert (tmp_path / "train" / "identity__corrected__1" / "metrics.jsonl").exists()
    assert 0 <= res["metrics"]["mcc/identity/inverse"] <= 1


def test_progressive_and_constraint_tiny(tmp_path: Path) -> None:
    cfg = replace(
        progressive_violation.QUICK,
        d=4,
        d_fixed=(0, 3, 4),
        steps=2,
        batch_size=16,
        hidden=(8,),
        linear_out_dim=6,
        n_test=64,
    )
    res = validate_results(progressive_violation.run(cfg, tmp_path / "pv"), tmp_path / "pv")
    assert [r[0] for r in res["tables"][0]["rows"]] == [0, 3, 4]
    cfg2 = replace(
        constraint_ratio.QUICK, rhos=(0.0, 0.5, 1.0), steps=2, batch_size=8, n_negatives=4, hidden=(8,), n_test=64
    )
    res2 = validate_results(constraint_ratio.run(cfg2, tmp_path / "cr"), tmp_path / "cr")
    assert len(res2["tables"][0]["rows"]) == 3
    with pytest.raises(ValueError, match="^rhos"):
        constraint_ratio.run(replace(cfg2, rhos=(1.5,)), tmp_path / "bad")


def test_image_identifiability_tiny(tmp_path: Path) -> None:
    cfg = replace(
        image_identifiability.QUICK,
        d=3,
        image_size=8,
        d_fixed=1,
        steps=2,
        batch_size=8,
        cnn_width=4,
        mlp_hidden=(16,),
        n_test=64,
    )
    res = validate_results(image_identifiability.run(cfg, tmp_path), tmp_path)
    assert {r[0] for r in res["tables"][0]["rows"]} == {"cnn", "mlp"}


def test_latent_run_is_deterministic() -> None:
    run = LatentRun(steps=3, batch_size=16, n_negatives=8, hidden=(8,), n_test=64, rho=0.5)
    a, b = train_latent(run), train_latent(run)
    assert a["r2"] == b["r2"] and a["final_loss"] == b["final_loss"]
