"""The audit's layout: headline scores and the grid from its own intervals, each diagnostic with its table and figure."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contrastlab.audit import AuditConfig
from contrastlab.audit.report_section import score_grid, score_label
from contrastlab.audit.run import audit
from contrastlab.tasks import published as published_module
from contrastlab.tasks import read_beir_task
from contrastlab.tasks.published import PublishedScores
from tests.audit.test_task_audit import write_task

HEADLINE_LABELS = ["nDCG@10", "MAP@100", "Recall@100", "MRR@10", "P@1"]


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("sentence_transformers")
    from tests.models.text_models import write_tiny_bert

    base = tmp_path_factory.mktemp("layout")
    return write_tiny_bert(base / "model", "st"), write_task(base / "toy")


def _task_audit(model: Path, task: Path, out: Path, **kw: Any) -> dict[str, Any]:
    cfg = AuditConfig(model=str(model), task=str(task), progress=False, n_boot=100, k_max=16, norm_words=40, **kw)
    return audit(cfg, out)


@pytest.fixture(scope="module")
def audited(tiny_task: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("audited") / "audit"
    return _task_audit(*tiny_task, out), out


def test_grid_has_a_row_per_family_and_a_column_per_cut_off() -> None:
    scores = {"ndcg_at_1": [0.5, 0.4, 0.6], "ndcg_at_10": [0.7, 0.6, 0.8], "recall_at_10": [0.9, 0.8, 1.0]}
    grid = score_grid({**scores, "map@r": [0.3, 0.2, 0.4]}, "t")
    assert grid["columns"] == ["score", "@1", "@10"]
    assert grid["rows"] == [
        ["nDCG", {"mean": 0.5, "low": 0.4, "high": 0.6}, {"mean": 0.7, "low": 0.6, "high": 0.8}],
        ["Recall", None, {"mean": 0.9, "low": 0.8, "high": 1.0}],
    ]
    assert [score_label(n) for n in ("ndcg_at_10", "map_at_100", "precision_at_1", "mrr@10", "map@r")] == [
        "nDCG@10",
        "MAP@100",
        "P@1",
        "MRR@10",
        "MAP@R",
    ]


def test_task_layout_opens_on_the_headline_and_gives_each_diagnostic_its_table_and_figure(
    audited: tuple[dict[str, Any], Path],
) -> None:
    res, out = audited
    layout = res["layout"]
    head = layout["headline"]
    assert head["columns"] == ["score", "this audit (95% interval)"]  # no published scores for this task
    assert [row[0] for row in head["rows"]] == HEADLINE_LABELS
    key = {"nDCG@10": "ndcg_at_10", "MAP@100": "map_at_100", "Recall@100": "recall_at_100", "MRR@10": "mrr_at_10"}
    for label, cell in head["rows"][:4]:
        assert [cell["mean"], cell["low"], cell["high"]] == res["intervals"][key[label]]
    assert [row[0] for row in layout["grid"]["rows"]] == ["nDCG", "MAP", "Recall", "P", "MRR"]
    assert layout["grid"]["columns"][1:] == ["@1", "@3", "@5", "@10", "@20", "@100", "@1000"]
    titles = [s["title"] for s in layout["sections"]]
    assert titles[:4] == [
        "The softmax search's temperature",
        "InfoNCE risk against the number of negatives",
        "The hard negatives' tail",
        "The query norm as a confidence",
    ]
    drawn = {f["file"] for f in res["figures"]}
    for section in layout["sections"]:
        assert section["figure"] is None or section["figure"] in drawn
        assert isinstance(section["table"], int) and section["verdict"].endswith(".")
    assert {s["figure"] for s in layout["sections"]} >= {"temperature.png", "risk.png", "norms.png"}
    tables = [res["tables"][s["table"]]["title"] for s in layout["sections"]]
    assert tables[0].startswith("Softmax search") and "InfoNCE risk" in tables[1]
    assert "metrics" in res and "Metrics" not in (out / "report.md").read_text()


def test_each_folds_cross_entropy_is_evaluated_on_the_grid_of_tau(audited: tuple[dict[str, Any], Path]) -> None:
    from contrastlab.audit.diagnostics import TEMPERATURE_GRID

    res, _ = audited
    cfg = res["config"]
    for curve in res["softmax_search"]["curves"]:
        taus = np.array([t for t, _ in curve])
        grid = np.geomspace(cfg["tau_min"], cfg["tau_max"], TEMPERATURE_GRID)
        assert np.all(np.diff(taus) > 0)
        assert all(np.isclose(taus, t, rtol=1e-12, atol=0).any() for t in grid)  # every grid point evaluated


def test_published_scores_sit_beside_the_headline_and_a_subset_is_said_not_comparable(
    tiny_task: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, task = tiny_task
    whole = read_beir_task(task, "test").fingerprint()
    entry = PublishedScores(
        model="tiny",
        aliases=(str(model),),
        task="toy",
        split="test",
        fingerprint=whole,
        scores={"ndcg_at_10": 0.5, "map_at_100": 0.25},
        source="a test's own entry",
        max_seq_length=0,
    )
    monkeypatch.setattr(published_module, "PUBLISHED", (entry,))
    res = _task_audit(model, task, tmp_path / "whole")
    head = res["layout"]["headline"]
    assert head["columns"][-1] == "MTEB published"
    assert [row[-1] for row in head["rows"]] == [0.5, 0.25, None, None, None]
    assert head["note"] == "Published: a test's own entry, on the whole split: comparable with this audit."
    res = _task_audit(model, task, tmp_path / "subset", max_queries=10)
    assert [row[-1] for row in res["layout"]["headline"]["rows"]][:2] == [0.5, 0.25]  # the whole split's print
    assert "Not comparable with this audit: a seeded subset (10 of 24 queries" in res["layout"]["headline"]["note"]


def test_pairs_layout_opens_on_recall_and_mrr(tmp_path: Path) -> None:
    from tests.audit.test_audit import FAST, _synthetic

    emb, pairs = _synthetic(tmp_path)
    res = audit(AuditConfig(model=str(emb), pairs=str(pairs), **FAST), tmp_path / "audit")
    layout = res["layout"]
    assert [row[0] for row in layout["headline"]["rows"]] == ["Recall@1", "MRR@100", "MAP@R"]
    assert [row[0] for row in layout["grid"]["rows"]] == ["Recall", "nDCG", "MRR"]
    first = layout["sections"][0]
    assert res["tables"][first["table"]]["title"].startswith("Softmax search") and first["figure"] == "temperature.png"
