"""MTEB's hub layout (corpus/, queries/, qrels/ as parquet or JSONL) reads as the same task as BEIR's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrastlab.tasks import beir_splits, is_beir_task, read_beir_task

CORPUS = [
    {"_id": "d1", "title": "Cats", "text": "Cats purr."},
    {"_id": "d2", "title": "", "text": "  Dogs bark. "},
    {"_id": "d3", "title": "Birds", "text": "Birds sing."},
]
QUERIES = [{"_id": "q1", "text": "what purrs"}, {"_id": "q2", "text": "what barks"}, {"_id": "q3", "text": "unjudged"}]
QRELS = [("q1", "d1", 2), ("q1", "d3", 0), ("q2", "d2", 1), ("q2", "d1", 1)]


def _beir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QUERIES))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS)
    )
    return root


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _hub(root: Path, fmt: str, *, corpus=None, qrels=None, id_key: str = "id") -> Path:
    """A snapshot as MTEB's hub repositories hold it: one data file per subset, named <split>-00000-of-00001."""
    corpus = (
        corpus if corpus is not None else [{id_key: r["_id"], "title": r["title"], "text": r["text"]} for r in CORPUS]
    )
    queries = [{id_key: r["_id"], "text": r["text"]} for r in QUERIES]
    qrels = qrels if qrels is not None else [{"query-id": q, "corpus-id": d, "score": s} for q, d, s in QRELS]
    for subset, rows in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        path = root / subset / f"test-00000-of-00001.{fmt}"
        if fmt == "jsonl":
            _jsonl(path, rows)
        else:
            pa = pytest.importorskip("pyarrow")
            pq = pytest.importorskip("pyarrow.parquet")
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows), path)
    return root


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("id_key", ["id", "_id"])
def test_a_hub_snapshot_reads_as_the_same_task_as_the_beir_folder(tmp_path: Path, fmt: str, id_key: str) -> None:
    beir = read_beir_task(_beir(tmp_path / "beir"), "test", name="t")
    hub_root = _hub(tmp_path / "hub", fmt, id_key=id_key)
    assert is_beir_task(hub_root) and beir_splits(hub_root) == ["test"]
    hub = read_beir_task(hub_root, "test", name="t")
    assert hub.fingerprint() == beir.fingerprint()
    assert hub.provenance["kind"] == "mteb-hub" and set(hub.provenance["sha256"]) == {
        f"{s}/test-00000-of-00001.{fmt}" for s in ("corpus", "queries", "qrels")
    }


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_beir_checks_hold_for_the_hub_layout(tmp_path: Path, fmt: str) -> None:
    unit = "line" if fmt == "jsonl" else "row"
    bad_doc = [{"query-id": "q1", "corpus-id": "d9", "score": 1}]
    with pytest.raises(
        ValueError, match=rf"qrels/test-00000-of-00001.{fmt} {unit} 1: corpus id 'd9' is not in the corpus"
    ):
        read_beir_task(_hub(tmp_path / "a", fmt, qrels=bad_doc), "test")
    bad_query = [{"query-id": "q9", "corpus-id": "d1", "score": 1}]
    with pytest.raises(ValueError, match="query id 'q9' is not in the queries"):
        read_beir_task(_hub(tmp_path / "b", fmt, qrels=bad_query), "test")
    twice = [{"id": "d1", "text": "a"}, {"id": "d1", "text": "b"}]
    with pytest.raises(ValueError, match=rf"corpus/test-00000-of-00001.{fmt} {unit} 2: duplicate id 'd1'"):
        read_beir_task(_hub(tmp_path / "c", fmt, corpus=twice), "test")
    graded = [{"query-id": "q1", "corpus-id": "d1", "score": "high"}]
    with pytest.raises(ValueError, match="score 'high' is not an integer grade"):
        read_beir_task(_hub(tmp_path / "d", fmt, qrels=graded), "test")
    judged_twice = [{"query-id": "q1", "corpus-id": "d1", "score": 1}] * 2
    with pytest.raises(ValueError, match="judges document 'd1' twice"):
        read_beir_task(_hub(tmp_path / "e", fmt, qrels=judged_twice), "test")
    with pytest.raises(ValueError, match=r"split: 'dev' is not a split .* it has: test"):
        read_beir_task(_hub(tmp_path / "f", fmt), "dev")


def test_top_level_jsonl_with_qrels_files_and_several_splits(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    _jsonl(root / "corpus.jsonl", CORPUS)
    _jsonl(root / "queries.jsonl", QUERIES)
    _jsonl(root / "qrels" / "test.jsonl", [{"query-id": q, "corpus-id": d, "score": s} for q, d, s in QRELS])
    _jsonl(root / "qrels" / "train.jsonl", [{"query-id": "q3", "corpus-id": "d2", "score": 1}])
    assert beir_splits(root) == ["test", "train"]
    assert read_beir_task(root, "train").query_ids == ("q3",)
    assert read_beir_task(root, "test").fingerprint() == read_beir_task(_beir(tmp_path / "b"), "test").fingerprint()
