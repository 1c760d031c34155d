from pathlib import Path

import pytest
import torch

from contrastlab.train import ConfigError, TrainConfig, dump_config, from_dict, load_config_file
from contrastlab.train.job import (
    DATA_BUILDERS,
    DataConfig,
    EncoderConfig,
    EvalConfig,
    JobConfig,
    LossConfig,
    NegativesConfig,
    build_encoder,
    make_loss_fn,
    run_job,
)

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
    from contrastlab.train.dataconf import from_dict
    from contrastlab.train.job import JobConfig, run_job

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
