"""The BEIR reader: MTEB's document text, verified files, one-line errors naming file and line."""

import json
from pathlib import Path

import pytest

from contrastlab.tasks import holdout, is_beir_task, read_beir_task

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact-train"


def write_task(root: Path, *, corpus=None, queries=None, qrels=None, split="test") -> Path:
    """A small BEIR folder: three documents, three queries, graded judgements."""
    corpus = (
        corpus
        if corpus is not None
        else [
            {"_id": "d1", "title": "Cats", "text": "Cats purr."},
            {"_id": "d2", "title": "", "text": "  Dogs bark. "},
            {"_id": "d3", "title": "Birds", "text": "Birds sing.", "metadata": {}},
        ]
    )
    queries = (
        queries
        if queries is not None
        else [
            {"_id": "q1", "text": "what purrs"},
            {"_id": "q2", "text": "what barks"},
            {"_id": "q3", "text": "unjudged"},
        ]
    )
    qrels = qrels if qrels is not None else "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t0\nq2\td2\t1\nq2\td1\t1\n"
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / f"{split}.tsv").write_text(qrels)
    return root


def test_reads_documents_as_mteb_embeds_them(tmp_path: Path) -> None:
    task = read_beir_task(write_task(tmp_path / "toy"), "test")
    assert task.name == "toy" and task.split == "test"
    assert task.doc_ids == ("d1", "d2", "d3")
    assert task.doc_texts == ("Cats Cats purr.", "Dogs bark.", "Birds Birds sing.")
    assert task.query_ids == ("q1", "q2")  # q3 has no judgements
    assert task.qrels == {"q1": {"d1": 2, "d3": 0}, "q2": {"d2": 1, "d1": 1}}
    assert task.relevant("q1") == {"d1": 2}
    assert task.num_judgements == 4
    assert set(task.provenance["sha256"]) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
    assert is_beir_task(tmp_path / "toy") and not is_beir_task(tmp_path)


def test_crlf_qrels_and_fingerprint(tmp_path: Path) -> None:
    a = read_beir_task(write_task(tmp_path / "a"), "test")
    crlf = "query-id\tcorpus-id\tscore\r\nq1\td1\t2\r\nq1\td3\t0\r\nq2\td2\t1\r\nq2\td1\t1\r\n"
    b = read_beir_task(write_task(tmp_path / "b", qrels=crlf), "test")
    assert a.qrels == b.qrels and a.fingerprint() == b.fingerprint()
    c = read_beir_task(write_task(tmp_path / "c", qrels=crlf.replace("\t2\r", "\t3\r")), "test")
    assert c.fingerprint() != a.fingerprint()


BAD = [
    ("corpus", [{"_id": "d1", "text": "a"}, {"_id": "d1", "text": "b"}], "corpus.jsonl line 2: duplicate id"),
    ("queries", [{"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}], "queries.jsonl line 2: duplicate id"),
    ("corpus", [{"_id": "d1"}], "corpus.jsonl line 1: no 'text'"),
    ("corpus", [{"_id": 3, "text": "x"}], "corpus.jsonl line 1: '_id' must be a string"),
    ("qrels", "query-id\tcorpus-id\tscore\nq1\tnope\t1\n", "test.tsv line 2: corpus id 'nope'"),
    ("qrels", "query-id\tcorpus-id\tscore\nq9\td1\t1\n", "test.tsv line 2: query id 'q9' is not in queries.jsonl"),
    ("qrels", "query-id\tcorpus-id\tscore\nq1\td1\t0.5\n", "test.tsv line 2: score '0.5' is not an integer"),
    ("qrels", "query-id\tcorpus-id\tscore\nq1\td1\n", "test.tsv line 2: expected 3 tab-separated columns"),
    ("qrels", "q1\td1\t1\n", "test.tsv line 1: expected a header"),
    ("qrels", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n", "test.tsv line 3: query 'q1' judges document"),
    ("qrels", "query-id\tcorpus-id\tscore\n", "split: 'test' of .* has no queries: .*test.tsv has a header but no"),
    ("qrels", "", "test.tsv is empty"),
]


@pytest.mark.parametrize(("part", "content", "message"), BAD)
def test_bad_files_are_named_with_their_line(tmp_path: Path, part: str, content, message: str) -> None:
    root = write_task(tmp_path / "t", **{part: content})
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_beir_task(root, "test")


def test_encodings_nul_bytes_and_missing_pieces(tmp_path: Path) -> None:
    root = write_task(tmp_path / "t")
    (root / "queries.jsonl").write_bytes('{"_id": "q1", "text": "a"}\n'.encode("utf-16"))
    with pytest.raises(ValueError, match="queries.jsonl is in the wrong encoding"):
        read_beir_task(root, "test")
    root = write_task(tmp_path / "u")
    (root / "corpus.jsonl").write_bytes(b'{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "b\x00"}\n')
    with pytest.raises(ValueError, match="corpus.jsonl line 2: a NUL byte"):
        read_beir_task(root, "test")
    with pytest.raises(ValueError, match=r"split: 'dev' is not a split .* it has: test"):
        read_beir_task(write_task(tmp_path / "v"), "dev")
    with pytest.raises(ValueError, match="is not a folder"):
        read_beir_task(tmp_path / "absent", "test")
    root = write_task(tmp_path / "w")
    (root / "corpus.jsonl").unlink()
    with pytest.raises(ValueError, match="corpus.jsonl is missing"):
        read_beir_task(root, "test")


def test_holdout_is_a_deterministic_partition_by_query_id(tmp_path: Path) -> None:
    queries = [{"_id": f"q{i}", "text": f"query {i}"} for i in range(200)]
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{1 + i % 3}\t1\n" for i in range(200))
    task = read_beir_task(write_task(tmp_path / "t", queries=queries, qrels=qrels), "test")
    train, dev = holdout(task, 0.25, seed=3)
    assert sorted(train.query_ids + dev.query_ids) == sorted(task.query_ids)
    assert not set(train.query_ids) & set(dev.query_ids)
    assert train.doc_ids == dev.doc_ids == task.doc_ids
    assert holdout(task, 0.25, seed=3)[1].query_ids == dev.query_ids
    assert holdout(task, 0.25, seed=4)[1].query_ids != dev.query_ids
    # a query's side depends on its id alone: dropping other queries moves nobody
    small = read_beir_task(write_task(tmp_path / "s", queries=queries[:50], qrels=qrels.split("q50\t")[0]), "test")
    assert set(holdout(small, 0.25, seed=3)[1].query_ids) == set(dev.query_ids) & set(small.query_ids)
    with pytest.raises(ValueError, match="dev_fraction"):
        holdout(task, 1.0)


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="the shared SciFact task is absent")
def test_reads_the_shared_scifact_split_with_its_published_hashes() -> None:
    task = read_beir_task(SCIFACT, "train")
    assert (len(task.doc_ids), len(task.query_ids), task.num_judgements) == (5183, 809, 919)
    assert task.provenance["sha256"]["corpus.jsonl"] == (
        "dec31c8182f3d744c7d2c09423756fd1d17cbef75808db13ba01cc0aab4d1ac6"
    )
    assert task.provenance["sha256"]["qrels/train.tsv"] == (
        "a53f2114831916c096b6c37d9e54da68cef4efdcdbd5ed46533601af972acf1d"
    )


def test_contrastlab_data_lists_the_tasks_it_finds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from contrastlab.cli import main

    write_task(tmp_path / "beir" / "toy", split="dev")
    (tmp_path / "beir" / "not-a-task").mkdir()
    assert main(["data", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'beir' / 'toy'}   splits: dev" in out
    assert "not-a-task" not in out
