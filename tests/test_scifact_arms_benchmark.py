"""benchmarks/scifact_arms.py: every arm is a job the command line accepts, in one declared order."""

import json
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


@pytest.mark.parametrize(
    "arm", [a for a in scifact_arms.ARMS if a.name not in scifact_arms.BASELINES], ids=lambda a: a.name
)
def test_each_contrastlab_arm_is_a_valid_job(arm, tmp_path: Path) -> None:
    mined = tmp_path / "mined.jsonl" if arm.mine is not None else None
    job = tmp_path / "job.yaml"
    job.write_text(scifact_arms.job_yaml(tmp_path / "task", 23, mined, arm.batch))
    _, subs = build_parser()
    _, overrides, _ = split_arguments(subs["train"], ["--train.seed", "1", *arm.overrides])
    config = load_job(str(job), overrides)
    assert config.train.steps == 23 and config.train.seed == 1 and config.data.batch_size == arm.batch
    assert config.data.name == ("text" if mined else "sources")
    assert config.train.optim.schedule == "linear" and config.train.optim.warmup_steps == 2


def test_a_second_round_mines_with_an_arm_that_runs_before_it() -> None:
    order = scifact_arms.PRIORITY
    for arm in scifact_arms.ARMS:
        if arm.mine_with is not None:
            assert arm.mine is not None and order.index(arm.mine_with) < order.index(arm.name)


def test_the_baselines_are_sentence_transformers_arms_and_the_best_on_dev_is_chosen() -> None:
    names = {a.name for a in scifact_arms.ARMS}
    assert set(scifact_arms.BASELINES) <= names
    assert scifact_arms.baseline({"st-mnrl": 0.64, "st-mnrl-3ep": 0.65, "infonce": 0.9}) == "st-mnrl-3ep"
    assert scifact_arms.baseline({"st-mnrl": 0.64, "infonce": 0.9}) == "st-mnrl"
    assert scifact_arms.baseline({"infonce": 0.9}) is None


def _audit(out: Path, arm: str, seed: int, ndcg: float) -> None:
    folder = out / arm / f"seed{seed}" / "audit"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"metrics": {"ndcg_at_10": ndcg}}))


def test_only_arms_with_every_seed_audited_count_as_finished(tmp_path: Path) -> None:
    _audit(tmp_path, "st-mnrl", 0, 0.5)
    _audit(tmp_path, "st-mnrl", 1, 0.7)
    _audit(tmp_path, "weince", 0, 0.9)  # seed 1 missing
    assert scifact_arms.finished(tmp_path, [0, 1]) == pytest.approx({"st-mnrl": 0.6})
    assert scifact_arms.finished(tmp_path, [0]) == pytest.approx({"st-mnrl": 0.5, "weince": 0.9})
