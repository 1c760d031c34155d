"""Published scores: each entry names the task split by its content, checked against the split itself."""

from pathlib import Path

import pytest

from contrastlab.tasks import read_beir_task
from contrastlab.tasks.published import PUBLISHED, published_scores

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact-train"


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="the shared SciFact task is absent")
def test_the_scifact_entry_names_the_shared_split_by_its_fingerprint() -> None:
    task = read_beir_task(SCIFACT, "train")
    entry = published_scores("minilm", task.fingerprint(), "train")
    assert entry is not None and entry.task == "SciFact" and entry.scores["ndcg_at_10"] == 0.66020


def test_a_model_task_or_split_not_published_has_no_entry() -> None:
    entry = PUBLISHED[0]
    assert published_scores(entry.aliases[0], entry.fingerprint, entry.split) is entry
    assert published_scores("some/other-model", entry.fingerprint, entry.split) is None
    assert published_scores(entry.aliases[0], "0" * 64, entry.split) is None
    assert published_scores(entry.aliases[0], entry.fingerprint, "test") is None
