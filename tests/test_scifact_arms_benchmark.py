"""benchmarks/scifact_arms.py: every arm is a job the command line accepts, in one declared order."""

import sys
from pathlib import Path

import pytest

from contrastlab.cli import build_parser
from contrastlab.cli._options import split_arguments
from contrastlab.cli.train import load_job

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import scifact_arms  # noqa: E402


def test_every_arm_has_a_unique_name_and_a_place_in_the_order() -> None:
    names = [a.name for a in scifact_arms.ARMS]
    assert len(set(names)) == len(names) and sorted(names) == sorted(scifact_arms.PRIORITY)


@pytest.mark.parametrize("arm", [a for a in scifact_arms.ARMS if a.name != "st-mnrl"], ids=lambda a: a.name)
def test_each_contrastlab_arm_is_a_valid_job(arm, tmp_path: Path) -> None:
    mined = tmp_path / "mined.jsonl" if arm.mine is not None else None
    job = tmp_path / "job.yaml"
    job.write_text(scifact_arms.job_yaml(tmp_path / "task", 23, mined))
    _, subs = build_parser()
    _, overrides, _ = split_arguments(subs["train"], ["--train.seed", "1", *arm.overrides])
    config = load_job(str(job), overrides)
    assert config.train.steps == 23 and config.train.seed == 1 and config.data.batch_size == 32
    assert config.data.name == ("text" if mined else "sources")
    assert config.train.optim.schedule == "linear" and config.train.optim.warmup_steps == 2
