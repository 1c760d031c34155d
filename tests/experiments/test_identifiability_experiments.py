"""Tiny end-to-end runs of the identifiability experiments (contract shape, files, determinism)."""

from dataclasses import fields, replace
from pathlib import Path

import pytest

from contrastlab.config import field_docs
from contrastlab.experiments import (
    _latent_cl,
    constraint_ratio,
    get_experiment,
    identifiability_table,
    image_identifiability,
    list_experiments,
    progressive_violation,
    validate_results,
)
from contrastlab.experiments._latent_cl import LatentRun, interval95, run_cached, train_latent


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
    row = res["tables"][0]["rows"][0]
    assert row[3] == "1.00"  # the paper's Identity/holds entry sits next to ours and our interval
    lo, hi = (float(v) for v in row[2].strip("[]").split(","))
    assert lo <= float(row[1].split(" ± ")[0]) <= hi
    assert (tmp_path / "identifiability_table.png").exists()
    assert (tmp_path / "train" / "identity__corrected__1" / "metrics.jsonl").exists()
    assert 0 <= res["metrics"]["mcc/identity/inverse"] <= 1


def test_progressive_and_constraint_tiny(tmp_path: Path) -> None:
    cfg = replace(
        progressive_violation.QUICK,
        generators=("linear", "monomial"),
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
    assert "r2/monomial/d_fixed=3" in res["metrics"]
    assert progressive_violation.Config().generators == ("linear", "monomial")  # the paper's pair
    cfg2 = replace(
        constraint_ratio.QUICK, rhos=(0.0, 0.5, 1.0), steps=2, batch_size=8, n_negatives=4, hidden=(8,), n_test=64
    )
    res2 = validate_results(constraint_ratio.run(cfg2, tmp_path / "cr"), tmp_path / "cr")
    assert len(res2["tables"][0]["rows"]) == 3
    with pytest.raises(ValueError, match="^rhos"):
        constraint_ratio.run(replace(cfg2, rhos=(1.5,)), tmp_path / "bad")


@pytest.mark.parametrize("module", [constraint_ratio, identifiability_table, progressive_violation])
def test_configs_share_the_training_settings_and_document_every_field(module) -> None:
    training = {
        "steps": 7,
        "lr": 0.01,
        "tau": 0.2,
        "hidden": (9,),
        "norm_order": "pre_act",
        "concentration": "kappa",
        "forward_passes": "separate",
        "n_test": 33,
    }
    cfg = replace(module.QUICK, **training)
    run = cfg.latent_run(generator="identity", d=3, d_fixed=1, n_negatives=4, batch_size=8, seed=5)
    want = LatentRun(generator="identity", d=3, d_fixed=1, n_negatives=4, batch_size=8, seed=5, **training)
    assert run == want
    docs = field_docs(module.Config)
    assert all(docs.get(f.name) for f in fields(module.Config)), docs


def _tiny_image_config(**kw: object) -> image_identifiability.Config:
    tiny = dict(d=3, image_size=8, d_fixed=1, steps=2, batch_size=8, cnn_width=4, mlp_hidden=(16,), n_test=64)
    return replace(image_identifiability.QUICK, **{**tiny, **kw})  # type: ignore[arg-type]


def test_image_identifiability_tiny(tmp_path: Path) -> None:
    res = validate_results(image_identifiability.run(_tiny_image_config(), tmp_path), tmp_path)
    assert {r[0] for r in res["tables"][0]["rows"]} == {"cnn", "mlp"}


def test_image_identifiability_split_campaign_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs split by encoder and regime over invocations are recorded and tabulated by one full call."""
    split = {}
    for e in ("cnn", "mlp"):
        for r in ("full", "restricted"):
            one = image_identifiability.run(_tiny_image_config(seeds=2, encoders=(e,), regimes=(r,)), tmp_path)
            assert len(one["tables"][0]["rows"]) == 1
            split[(e, r)] = one["metrics"][f"r2/{e}/{r}"]
    assert len(list(tmp_path.glob("train/*/result.json"))) == 8

    def no_training(*args: object, **kwargs: object) -> dict[str, float]:
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr(image_identifiability, "_train_one", no_training)
    res = validate_results(image_identifiability.run(_tiny_image_config(seeds=2), tmp_path), tmp_path)
    assert {k: res["metrics"][f"r2/{k[0]}/{k[1]}"] for k in split} == split
    row = res["tables"][0]["rows"][0]
    assert len(row[3].split(", ")) == 2  # R² per seed
    with pytest.raises(AssertionError, match="trained again"):  # other settings: trained, not read back
        image_identifiability.run(_tiny_image_config(seeds=2, lr=2e-3, encoders=("mlp",)), tmp_path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("encoders", ("vit",)), ("encoders", ()), ("regimes", ("partial",)), ("regimes", ("full", "full"))],
)
def test_image_identifiability_rejects_bad_selection(tmp_path: Path, field: str, value: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match=field):
        image_identifiability.run(_tiny_image_config(**{field: value}), tmp_path)


def test_latent_run_is_deterministic() -> None:
    run = LatentRun(steps=3, batch_size=16, n_negatives=8, hidden=(8,), n_test=64, rho=0.5)
    a, b = train_latent(run), train_latent(run)
    assert a["r2"] == b["r2"] and a["final_loss"] == b["final_loss"]


def test_separate_forward_passes_matter_only_through_batchnorm() -> None:
    # Without BatchNorm every row's embedding is independent of the rest of the batch, so one pass over
    # anchors, positives and negatives and three passes train the same model (up to float summation order).
    base = LatentRun(steps=3, batch_size=16, n_negatives=8, hidden=(8,), n_test=64)
    plain = replace(base, batch_norm=False)
    a, b = train_latent(plain), train_latent(replace(plain, forward_passes="separate"))
    assert a["final_loss"] == pytest.approx(b["final_loss"], abs=1e-5)
    assert a["r2"] == pytest.approx(b["r2"], abs=1e-5)
    # With BatchNorm the three passes normalise with different statistics, and training differs.
    c, d = train_latent(base), train_latent(replace(base, forward_passes="separate"))
    assert abs(c["final_loss"] - d["final_loss"]) > 1e-4
    with pytest.raises(ValueError, match="^forward_passes"):
        train_latent(replace(base, forward_passes="twice"))  # type: ignore[arg-type]


def test_run_cached_records_and_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = LatentRun(steps=2, batch_size=8, n_negatives=8, hidden=(8,), n_test=32)
    first = run_cached(run, tmp_path)
    assert (tmp_path / "result.json").is_file()

    def no_training(*args: object, **kwargs: object) -> dict[str, float]:
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr(_latent_cl, "train_latent", no_training)
    assert run_cached(run, tmp_path) == first  # same settings: read back, not retrained
    with pytest.raises(AssertionError, match="trained again"):
        run_cached(LatentRun(**{**run.__dict__, "seed": 1}), tmp_path)  # other settings: retrained
    monkeypatch.undo()
    (tmp_path / "result.json").write_text("{not json", encoding="utf-8")
    again = run_cached(run, tmp_path)  # an unreadable record is replaced by a fresh (deterministic) run
    assert again["r2"] == first["r2"]


def test_interval95() -> None:
    rows = [{"v": 1.0}, {"v": 2.0}, {"v": 3.0}]
    m, lo, hi = interval95(rows, "v")
    # mean 2, sd 1; with 2 degrees of freedom the t quantile has the closed form
    # t_p = (2p − 1) / √(2p(1 − p)), so t_{0.975, 2} = 0.95 / √0.04875 ≈ 4.3027 and the half-width is t / √3.
    t = 0.95 / 0.04875**0.5
    assert m == 2.0
    assert abs((hi - lo) / 2 - t / 3**0.5) < 1e-9
    assert interval95([{"v": 0.5}], "v") == (0.5, 0.5, 0.5)
