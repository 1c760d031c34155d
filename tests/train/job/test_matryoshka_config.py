"""The ``matryoshka`` block of a job config: parsed and checked, applied to the training and held-out loss."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch

from contrastlab import cli
from contrastlab.losses import info_nce, matryoshka, supcon
from contrastlab.train import ConfigError, TrainConfig, dump_config, from_dict, load_config_file
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig
from contrastlab.train.job.matryoshka import MatryoshkaConfig
from contrastlab.train.job.runner import DATA_BUILDERS, call_loss, make_loss_fn, run_job

TINY = JobConfig(
    data=DataConfig(latent_dim=3, batch_size=16, mixing="linear"),
    encoder=EncoderConfig(hidden=(8,), out_dim=6),
    matryoshka=MatryoshkaConfig(dims=(2, 4, 6), weights=(1.0, 0.5, 2.0)),
    train=TrainConfig(steps=4, log_every=2, progress=False),
    eval=EvalConfig(n=32),
)


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_round_trips_through_config_files(tmp_path: Path, suffix: str) -> None:
    for cfg in (TINY, replace(TINY, matryoshka=MatryoshkaConfig())):
        dump_config(cfg, tmp_path / f"job{suffix}")
        assert from_dict(JobConfig, load_config_file(tmp_path / f"job{suffix}")) == cfg


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"dims": [2, 2]}, r"^matryoshka\.dims must be strictly increasing"),
        ({"dims": [4, 3]}, r"^matryoshka\.dims must be strictly increasing"),
        ({"dims": [0, 3]}, r"^matryoshka\.dims must be >= 1"),
        ({"dims": [2, 7]}, r"^matryoshka\.dims: width 7 is larger than the embedding width D = 6 \(encoder\.out_dim\)"),
        ({"dims": [2, 6], "weights": [1.0]}, r"^matryoshka\.weights must hold one weight per width \(2\), got 1"),
        ({"dims": [2, 6], "weights": [1.0, -1.0]}, r"^matryoshka\.weights must be finite and >= 0"),
        ({"weights": [1.0]}, r"^matryoshka\.weights needs dims"),
        ({"dims": "2,6"}, r"^matryoshka\.dims must be a list"),
        ({"width": 3}, r"^matryoshka\.width is not a field of MatryoshkaConfig"),
    ],
)
def test_bad_blocks_name_the_field(block: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        from_dict(JobConfig, {"encoder": {"hidden": [8], "out_dim": 6}, "matryoshka": block})


def test_the_projection_head_is_the_width_checked() -> None:
    with pytest.raises(ConfigError, match=r"D = 4 \(encoder\.proj_dim\)"):
        from_dict(JobConfig, {"encoder": {"out_dim": 8, "proj_dim": 4}, "matryoshka": {"dims": [2, 8]}})
    assert from_dict(JobConfig, {"encoder": {"out_dim": 8, "proj_dim": 4}, "matryoshka": {"dims": [2, 4]}})


def test_objective_is_the_wrapped_loss() -> None:
    src = DATA_BUILDERS["sphere"](TINY)
    batch = src.batch_at(0)
    emb = torch.randn(2 * 16, 6, dtype=torch.float64)
    got = make_loss_fn(TINY).loss(emb, batch)
    a, p = emb[:16], emb[16:]
    want = matryoshka(partial(info_nce, temperature=0.1, gather=True), a, p, dims=(2, 4, 6), weights=(1.0, 0.5, 2.0))
    assert torch.equal(got, want)
    plain = make_loss_fn(replace(TINY, matryoshka=MatryoshkaConfig())).loss(emb, batch)
    assert torch.equal(plain, info_nce(a, p, temperature=0.1))


def test_labelled_losses_keep_their_labels() -> None:
    z, y = torch.randn(8, 6, dtype=torch.float64), torch.tensor([0, 1, 2, 3])
    nested = MatryoshkaConfig(dims=(3, 6))
    got = call_loss(LossConfig(name="supcon"), z[:4], z[4:], labels=y, matryoshka=nested)
    assert torch.equal(got, matryoshka(supcon, z, torch.cat([y, y]), dims=(3, 6)))


def test_a_job_trains_and_says_so(tmp_path: Path) -> None:
    results = run_job(TINY, tmp_path / "run")
    assert "over the prefixes [2, 4, 6]" in results["summary"]
    assert results["config"]["matryoshka"] == {"dims": [2, 4, 6], "weights": [1.0, 0.5, 2.0]}
    assert all(v == v for v in results["metrics"].values() if isinstance(v, float))


def test_cli_refuses_a_bad_width_in_one_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "job.yaml"
    dump_config(replace(TINY, matryoshka=MatryoshkaConfig()), config)
    argv = ["train", str(config), "--out", str(tmp_path / "run"), "--quiet"]
    assert cli.main([*argv, "--matryoshka.dims", "2,9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matryoshka.dims: width 9 is larger than the embedding width D = 6" in err
    assert cli.main([*argv, "--matryoshka.dims", "4,2"]) == 2
    assert "matryoshka.dims must be strictly increasing" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing written
