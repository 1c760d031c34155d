"""The distillation losses in a ``contrastlab train`` job: data without a teacher's scores is refused up front."""

from pathlib import Path

import pytest

from contrastlab.config import from_dict
from contrastlab.train import ConfigError
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.runner import run_job


@pytest.mark.parametrize("name", ["margin_mse", "distill_kl"])
def test_data_without_teacher_scores_is_refused_before_anything_is_written(name: str, tmp_path: Path) -> None:
    cfg = from_dict(
        JobConfig,
        {
            "data": {"latent_dim": 3, "batch_size": 8},
            "encoder": {"hidden": [8], "out_dim": 3},
            "loss": {"name": name},
            "negatives": {"kind": "per_anchor", "num": 4},
            "eval": {"n": 32},
        },
    )
    with pytest.raises(ConfigError, match=rf"^loss\.name '{name}' distils a teacher's scores; data\.name 'sphere'"):
        run_job(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
