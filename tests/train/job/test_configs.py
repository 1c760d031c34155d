"""Every example job in configs/ runs for a few steps through ``contrastlab train``.

File-backed datasets read tiny files written in their standard format (tests/data/writers.py) into a
temporary data root; the configs' own architectures, losses and augmentations are kept, only the run is
shortened (steps, batch, held-out size).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrastlab import cli
from contrastlab.config import from_dict, load_config_file, to_dict
from contrastlab.data import DATASETS
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from tests.data.writers import WRITERS

# every file of configs/ is a `contrastlab train` job but recipe.yaml, the settings of `contrastlab run recipe`
# (tests/experiments/test_recipe.py checks it)
CONFIGS = sorted(p for p in (Path(__file__).resolve().parents[3] / "configs").glob("*.yaml") if p.name != "recipe.yaml")
SHORT = ["--train.steps", "2", "--train.log_every", "1", "--train.eval_every", "0", "--train.device", "cpu"]
SHORT += ["--train.precision", "fp32", "--train.checkpoint_every", "0", "--quiet"]


def test_there_is_one_config_per_family() -> None:
    names = {from_dict(JobConfig, load_config_file(p)).data.name for p in CONFIGS}
    # CIFAR-10H trains on CIFAR-10's files (its human labels only change the test labels)
    assert set(DATA_BUILDERS) - names == {"cifar10h"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_runs_a_few_steps(path: Path, tmp_path: Path, capsys) -> None:
    config = from_dict(JobConfig, load_config_file(path))
    root = tmp_path / "data"
    if config.data.name in WRITERS:
        WRITERS[config.data.name](root, 6)
    out = tmp_path / "run"
    argv = ["train", str(path), "--out", str(out), "--data.root", str(root), "--data.batch_size", "4"]
    assert cli.main([*argv, "--eval.n", "32", *SHORT]) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    for part in ("views", "encoder", "loss"):  # the config's own choices, unshortened
        assert results["config"][part] == to_dict(config)[part]
    metrics = results["metrics"]
    assert metrics["train_loss"] is not None and all(v == v for v in metrics.values())  # finite, not NaN
    assert ("eval_probe_accuracy" in metrics) == (config.data.name in DATASETS)  # labelled image data
