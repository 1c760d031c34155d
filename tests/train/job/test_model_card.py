"""The README model card of an exported text run: every value from the run's config and results, nothing else."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

import contrastlab
from contrastlab import cli
from contrastlab.config import from_dict
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.export import MODEL_FOLDER
from contrastlab.train.job.model_card import run_card_from_results
from contrastlab.train.job.runner import run_job
from tests.train.job._text_files import bert_and_pairs

pytest.importorskip("sentence_transformers")
ROWS = [(f"query number {i} about topic {i % 3}", f"def answer_{i}(x)") for i in range(20)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("card")
    bert, pairs = bert_and_pairs(root, ROWS)
    job = {
        "data": {"name": "text", "batch_size": 4, "text": {"path": str(pairs)}},
        "encoder": {"name": "sentence_transformers", "path": str(bert), "out_dim": 16, "max_seq_length": 12},
        "loss": {"name": "info_nce", "temperature": 0.3, "learnable_temperature": True},
        "train": {"steps": 3, "seed": 2, "progress": False, "log_every": 1, "optim": {"lr": 0.002}},
        "eval": {"n": 6},
    }
    run_job(from_dict(JobConfig, job), root / "run")
    return root / "run"


def test_the_card_names_base_data_loss_budget_step_and_the_measured_metrics(run: Path) -> None:
    card = (run / MODEL_FOLDER / "README.md").read_text(encoding="utf-8")
    results = json.loads((run / "results.json").read_text())
    pairs = run.parent / "pairs.tsv"
    assert card.startswith("---\nlibrary_name: sentence-transformers\n")
    assert f"base_model: {run.parent / 'st'}" in card
    assert hashlib.sha256(pairs.read_bytes()).hexdigest() in card and "rows: `20`" in card
    assert "`info_nce`, temperature 0.3 (learned; its start value)" in card
    assert f"learned temperature at step 3: {results['learned']['temperature']:.6g}" in card
    assert "3 steps of batch 4, seed 2" in card and "lr 0.002" in card
    assert "The folder holds the weights of step 3." in card
    assert f"contrastlab {contrastlab.__version__}" in card
    measured = {k.removeprefix("eval_"): v for k, v in results["metrics"].items() if k.startswith("eval_")}
    rows = dict(re.findall(r"^\| (\w+) \| (-?[\d.]+) \| not computed \|$", card, flags=re.M))
    assert rows and rows == {k: f"{v:.4f}" for k, v in measured.items()}  # exactly the run's metrics, no other


def test_a_step_without_an_evaluation_gets_no_metric(run: Path) -> None:
    cfg = json.loads((run / "config.json").read_text())
    results = json.loads((run / "results.json").read_text())
    card = run_card_from_results(cfg, results, step=2)  # the run evaluated at step 3 only
    assert "No held-out metric was measured at that step." in card and "| metric |" not in card
    assert "learned temperature" not in card and "training time" not in card
    assert "No held-out metric was measured" in run_card_from_results(cfg, {}, step=3)


def test_contrastlab_export_writes_the_same_card(run: Path, tmp_path: Path) -> None:
    assert cli.main(["export", str(run), "--st", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "README.md").read_text() == (run / MODEL_FOLDER / "README.md").read_text()


@pytest.mark.parametrize(
    ("columns", "teacher", "line"),
    [
        (["anchor", "positive"], False, "- negatives: in_batch"),
        (["anchor", "positive", "negative_1", "negative_2"], False, "- negatives: each row's 2 negative column(s) (per anchor)"),
        (["anchor", "positive", "negative_1"], True, "- candidates: each row's positive and its 1 negative column(s), scored by the teacher"),
    ],
)  # fmt: skip
def test_the_card_says_which_negatives_the_loss_saw(columns: list[str], teacher: bool, line: str) -> None:
    from contrastlab.train.job.model_card import model_card

    prov: dict[str, object] = {"kind": "pairs file", "path": "p.tsv", "rows": 8, "columns": columns}
    if teacher:
        prov["teacher_scores"] = {"path": "p.tsv.teacher.jsonl", "teacher": "T", "sha256": "ab"}
    config = {"data": {"name": "text"}, "loss": {"name": "info_nce"}, "negatives": {"kind": "in_batch"}}
    card = model_card(config=config, step=1, metrics=None, version="0", similarity="cosine", data_provenance=prov)
    assert line in card.splitlines()
    assert ("- teacher scores: `p.tsv.teacher.jsonl` (teacher `T`, sha256 `ab`)" in card) is teacher
