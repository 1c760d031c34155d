from dataclasses import replace
from pathlib import Path

import pytest
import torch

from contrastlab.train import (
    ConfigError,
    TrainConfig,
    dump_config,
    from_dict,
    load_config_file,
    step_generator,
    to_dict,
)
from contrastlab.train.job.config import (
    DataConfig,
    EncoderConfig,
    EvalConfig,
    JobConfig,
    LossConfig,
    NegativesConfig,
    loss_registry,
    needs_negatives,
)
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import build_encoder, make_loss_fn, run_job
from tests.train.job._loss_batch import sphere_batch_for

TINY = JobConfig(
    data=DataConfig(latent_dim=3, batch_size=16, mixing="linear"),
    encoder=EncoderConfig(hidden=(8,), out_dim=3),
    train=TrainConfig(steps=6, log_every=3, progress=False),
    eval=EvalConfig(n=32),
)


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_job_config_round_trip(tmp_path: Path, suffix: str) -> None:
    dump_config(TINY, tmp_path / f"job{suffix}")
    assert from_dict(JobConfig, load_config_file(tmp_path / f"job{suffix}")) == TINY


def test_cross_field_and_range_checks_name_the_field() -> None:
    with pytest.raises(ConfigError, match="negatives.kind"):
        JobConfig(loss=LossConfig(name="nt_xent"), negatives=NegativesConfig(kind="shared"))
    with pytest.raises(ConfigError, match=r"^data\.latent_dim must be >= 2"):
        from_dict(JobConfig, {"data": {"latent_dim": 1}})
    with pytest.raises(ConfigError, match=r"^loss\.temperature must be > 0"):
        from_dict(JobConfig, {"loss": {"temperature": 0}})


@pytest.mark.parametrize(("kind", "shape"), [("in_batch", None), ("shared", (5, 3)), ("per_anchor", (16, 5, 3))])
def test_sphere_batches_and_negatives(kind: str, shape) -> None:
    cfg = JobConfig(**{**TINY.__dict__, "negatives": NegativesConfig(kind=kind, num=5)})
    src = DATA_BUILDERS["sphere"](cfg)
    b = src.batch_at(2)
    assert b["anchor"].shape == (16, src.in_dim) and torch.equal(b["anchor"], src.batch_at(2)["anchor"])
    assert torch.allclose(b["latent"].norm(dim=1), torch.ones(16), atol=1e-5)
    assert (None if "negatives" not in b else tuple(b["negatives"].shape[:-1]) + (3,)) == (
        None if shape is None else shape
    )
    loss = make_loss_fn(cfg)(build_encoder(cfg, src), b)
    assert loss.ndim == 0 and torch.isfinite(loss)


def test_run_job_writes_config_results_and_is_deterministic(tmp_path: Path) -> None:
    a = run_job(TINY, tmp_path / "a")
    b = run_job(TINY, tmp_path / "b")
    assert a["metrics"] == b["metrics"] and set(a["metrics"]) >= {"train_loss", "eval_loss", "eval_latent_r2"}
    assert (tmp_path / "a" / "config.json").is_file() and (tmp_path / "a" / "results.json").is_file()
    with pytest.raises(ConfigError, match="data.name"):
        run_job(JobConfig(data=DataConfig(name="cifar99")), tmp_path / "c")


def test_weince_job_trains_and_evaluates(tmp_path):
    from contrastlab.config import from_dict
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.runner import run_job

    cfg = from_dict(
        JobConfig,
        {
            "data": {"name": "sphere", "latent_dim": 3, "mixing": "identity", "batch_size": 96},
            "loss": {"name": "weince", "temperature": 0.5},
            "encoder": {"hidden": [16], "out_dim": 3},
            "train": {"steps": 5, "log_every": 5, "progress": False},
            "eval": {"n": 192},
        },
    )
    res = run_job(cfg, tmp_path)
    assert res["metrics"]["train_loss"] is not None and res["metrics"]["eval_loss"] > 0


@pytest.mark.parametrize("name", sorted(loss_registry()))
def test_every_registered_loss_trains_through_the_job(name: str) -> None:
    # each loss gets the arguments its signature asks for: labels, required negatives, gather
    fn = loss_registry()[name]
    needs = needs_negatives(fn)
    negatives = NegativesConfig(kind="per_anchor", num=8) if needs else NegativesConfig()
    cfg = replace(TINY, loss=LossConfig(name=name, temperature=0.5), negatives=negatives)
    src, batch = sphere_batch_for(fn, cfg)
    model = build_encoder(cfg, src)
    loss = make_loss_fn(cfg)(model, batch)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_loss_options_reach_the_loss_and_bad_options_name_the_field() -> None:
    cfg = from_dict(JobConfig, {**to_dict(TINY), "loss": {"name": "info_nce", "options": {"variant": "dcl"}}})
    dcl = from_dict(JobConfig, {**to_dict(TINY), "loss": {"name": "dcl"}})
    src = DATA_BUILDERS["sphere"](cfg)
    batch = src.batch_at(0)
    torch.manual_seed(0)
    model = build_encoder(cfg, src)
    assert torch.equal(make_loss_fn(cfg)(model, batch), make_loss_fn(dcl)(model, batch))
    with pytest.raises(ConfigError, match=r"^loss\.options\.beta is not an option of loss 'info_nce'; its options: "):
        from_dict(JobConfig, {"loss": {"options": {"beta": 1.0}}})
    with pytest.raises(ConfigError, match=r"^loss\.options\.temperature is not an option"):  # set by loss.temperature
        from_dict(JobConfig, {"loss": {"options": {"temperature": 1.0}}})
    with pytest.raises(ConfigError, match=r"^loss\.symmetric=True is not available"):
        from_dict(JobConfig, {"loss": {"name": "nt_xent", "symmetric": True}})


def test_a_bad_combination_writes_nothing(tmp_path: Path) -> None:
    cfg = from_dict(JobConfig, {**to_dict(TINY), "encoder": {"name": "cnn", "out_dim": 3}})
    with pytest.raises(ConfigError, match=r"^encoder\.name 'cnn' needs image data; data\.name 'sphere' gives vectors"):
        run_job(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"^negatives\.kind='shared' needs data that draws fresh negatives"):
        run_job(from_dict(JobConfig, {"data": {"name": "digits"}, "negatives": {"kind": "shared"}}), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    from contrastlab.data import DatasetNotFoundError

    with pytest.raises(DatasetNotFoundError, match=r"(?s)^data\.root: .* never downloads"):
        run_job(from_dict(JobConfig, {"data": {"name": "svhn", "root": str(tmp_path)}}), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"^eval\.n must be >= 10 on sphere"):
        from_dict(JobConfig, {"encoder": {"out_dim": 3}, "eval": {"n": 9}})


def test_sphere_job_uses_the_sphere_world() -> None:
    from contrastlab.worlds.vmf_world import SphereWorld

    src = DATA_BUILDERS["sphere"](TINY)
    world = SphereWorld.from_mixing("linear", d=3, kappa=TINY.views.kappa, seed=0)
    x_a, x_p, z, _ = world.sample_pairs(16, generator=step_generator(TINY.train.seed, 4))
    b = src.batch_at(4)
    assert torch.equal(b["anchor"], x_a) and torch.equal(b["positive"], x_p) and torch.equal(b["latent"], z.float())


def test_a_held_out_set_of_one_distinct_anchor_says_why_uniformity_is_not_given(tmp_path: Path) -> None:
    """Two held-out rows of one query: uniformity is 0 whatever the model, so the summary gives the reason instead."""
    pytest.importorskip("sentence_transformers")
    from tests.models.text_models import write_tiny_bert

    bert = write_tiny_bert(tmp_path / "st", "st")
    pairs = tmp_path / "pairs.tsv"
    rows = [(f"query {i}", f"answer {i}") for i in range(8)] + [("one query", f"answer {i}") for i in range(8, 10)]
    pairs.write_text("".join(f"{q}\t{d}\n" for q, d in rows), encoding="utf-8")
    job = {
        "data": {"name": "text", "batch_size": 4, "text": {"path": str(pairs)}},
        "encoder": {"name": "sentence_transformers", "path": str(bert), "out_dim": 16, "max_seq_length": 8},
        "loss": {"name": "info_nce", "temperature": 0.5},
        "train": {"steps": 1, "seed": 1, "progress": False, "log_every": 1},
        "eval": {"n": 2},
    }
    results = run_job(from_dict(JobConfig, job), tmp_path / "run")
    summary = results["summary"]
    assert "uniformity not informative (fewer than two distinct held-out anchors: 2 rows, 1 distinct)" in summary
    assert "uniformity 0" not in summary and "uniformity -0" not in summary
    from contrastlab.train.job.runner import _uninformative_held_out

    assert _uninformative_held_out(torch.tensor([[1, 2], [1, 3]])) == {}  # two distinct anchors: informative


def test_results_record_the_device_auto_resolved_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = replace(TINY, train=replace(TINY.train, steps=2, device=TrainConfig().device))
    assert cfg.train.device == "auto"
    results = run_job(cfg, tmp_path / "run")
    assert results["device"] == "cpu"
    from contrastlab.io import read_json_verified

    assert read_json_verified(tmp_path / "run" / "results.json")["device"] == "cpu"
