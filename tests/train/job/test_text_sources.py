"""Several text datasets in one run (``data.name: sources``): sampling, one source per batch or mixed, exact resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from contrastlab import cli
from contrastlab.config import ConfigError, from_dict
from contrastlab.data.text.codes import codes_to_texts
from contrastlab.train import TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import run_job
from contrastlab.train.job.sources_config import SourceConfig, SourcesConfig

pytest.importorskip("sentence_transformers")


def _files(tmp_path: Path) -> list[Path]:
    out = []
    for name, n in (("alpha", 20), ("beta", 10)):
        p = tmp_path / f"{name}.tsv"
        p.write_text("".join(f"{name} query {i}\t{name} answer {i}\n" for i in range(n)), encoding="utf-8")
        out.append(p)
    return out


def job(tmp_path: Path, bert: Path, **sources: object) -> JobConfig:
    datasets = tuple(SourceConfig(path=str(p)) for p in _files(tmp_path))
    return JobConfig(
        data=DataConfig(name="sources", batch_size=4, sources=SourcesConfig(datasets=datasets, **sources)),  # type: ignore[arg-type]
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=12),
        loss=LossConfig(temperature=0.5),
        train=TrainConfig(steps=6, seed=3, progress=False, log_every=1, eval_every=0, checkpoint_every=1),
        eval=EvalConfig(n=4),
    )


def _origin(batch: dict) -> set[str]:
    return {t.split()[0] for t in codes_to_texts(batch["anchor"]) + codes_to_texts(batch["positive"])}


@pytest.mark.parametrize("sampling", ["round_robin", "proportional"])
def test_per_source_batches_come_from_one_source_in_the_schedule(sampling: str, tmp_path: Path, bert: Path) -> None:
    source = DATA_BUILDERS["sources"](job(tmp_path, bert, sampling=sampling))
    origins = [_origin(source.batch_at(s)) for s in range(18)]
    assert all(len(o) == 1 for o in origins)  # no negatives across datasets
    counts = Counter(next(iter(o)) for o in origins)
    if sampling == "round_robin":
        assert [next(iter(o)) for o in origins[:4]] == ["alpha", "beta", "alpha", "beta"]
    else:  # 18 training pairs against 8: shares 18/26 and 8/26 of 18 steps, each within one
        assert abs(counts["alpha"] - 18 * 18 / 26) < 1 and abs(counts["beta"] - 18 * 8 / 26) < 1
    assert sorted(codes_to_texts(source.eval_batch["anchor"])) == sorted(
        ["alpha query 18", "alpha query 19", "beta query 8", "beta query 9"]
    )  # ceil(eval.n / 2) rows held out from each source


def test_mixed_batches_draw_from_the_union(tmp_path: Path, bert: Path) -> None:
    source = DATA_BUILDERS["sources"](job(tmp_path, bert, batches="mixed"))
    assert any(len(_origin(source.batch_at(s))) == 2 for s in range(10))


def test_resume_is_exact(tmp_path: Path, bert: Path) -> None:
    from tests.train.job.test_select import _crash_at

    cfg = job(tmp_path, bert, sampling="proportional")
    straight = run_job(cfg, tmp_path / "a")
    _crash_at(cfg, tmp_path / "b", 4)
    resumed = run_job(cfg, tmp_path / "b", resume=True)
    assert resumed["resumed_from"] == 4 and resumed["metrics"] == straight["metrics"]


def test_an_empty_source_is_named(tmp_path: Path, bert: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"^data\.sources\.datasets\[1\]\.path must name"):
        from_dict(JobConfig, {"data": {"sources": {"datasets": [{"path": "a.tsv"}, {"path": ""}]}}})
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    config = tmp_path / "job.yaml"
    alpha = _files(tmp_path)[0]
    config.write_text(
        "data: {name: sources, batch_size: 4, sources: {datasets: "
        f"[{{path: '{alpha}'}}, {{path: '{empty}'}}]}}}}\n"
        f"encoder: {{name: sentence_transformers, path: '{bert}', out_dim: 16, max_seq_length: 12}}\n"
        "eval: {n: 4}\n"
    )
    out = tmp_path / "run"
    assert cli.main(["train", str(config), "--out", str(out), "--train.steps", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "data.sources.datasets[1].path" in err and "Traceback" not in err, err
    assert not out.exists()
    with pytest.raises(ConfigError, match="data.sources.datasets must list"):
        DATA_BUILDERS["sources"](JobConfig(data=DataConfig(name="sources")))


def _task(tmp_path: Path) -> Path:
    """A BEIR folder of 30 queries over 40 documents: query i judges documents i and i + 1 (grade 1, 2) and
    document 39 as non-relevant (grade 0)."""
    from tests.tasks.test_beir import write_task

    corpus = [{"_id": f"d{j:02d}", "title": f"title {j}", "text": f"body of document {j}"} for j in range(40)]
    queries = [{"_id": f"q{i:02d}", "text": f"question number {i}"} for i in range(30)]
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i:02d}\td{i:02d}\t1\nq{i:02d}\td{i + 1:02d}\t2\nq{i:02d}\td39\t0\n" for i in range(30)
    )
    return write_task(tmp_path / "task", corpus=corpus, queries=queries, qrels=qrels, split="train")


def test_task_source_pairs_every_relevant_document_and_keeps_the_holdout_apart(tmp_path: Path) -> None:
    from contrastlab.tasks import holdout, read_beir_task
    from contrastlab.train.job.text_sources import read_source

    folder = _task(tmp_path)
    train = read_source(SourceConfig(path=str(folder), kind="task", split="train", part="train"), "x")
    dev = read_source(SourceConfig(path=str(folder), kind="task", split="train", part="dev"), "x")
    task = read_beir_task(folder, "train")
    t_part, d_part = holdout(task, dev_fraction=0.2, seed=0)
    assert len(train) == 2 * len(t_part.query_ids) and len(dev) == 2 * len(d_part.query_ids)  # grade 0 left out
    assert {r[0] for r in train.rows}.isdisjoint({r[0] for r in dev.rows})
    i = int(t_part.query_ids[0][1:])
    assert (f"question number {i}", f"title {i} body of document {i}") in train.rows
    with pytest.raises(ConfigError, match=r"^y\.path: .*"):
        read_source(SourceConfig(path=str(tmp_path / "missing"), kind="task"), "y")


def test_task_source_protects_a_querys_other_documents_and_dev_metrics_use_the_task(tmp_path: Path, bert: Path) -> None:
    from contrastlab.train.job.dev_metrics import read_dev
    from contrastlab.train.job.select import DevConfig, SelectConfig

    folder = _task(tmp_path)
    cfg = JobConfig(
        data=DataConfig(
            name="sources",
            batch_size=6,
            sources=SourcesConfig(datasets=(SourceConfig(path=str(folder), kind="task", split="train", part="train"),)),
        ),
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=16),
        loss=LossConfig(temperature=0.5),
        train=TrainConfig(steps=4, seed=0, progress=False, log_every=1, eval_every=2),
        eval=EvalConfig(n=4),
        select=SelectConfig(metric="ndcg@10", dev=DevConfig(path=str(folder), kind="task", split="train")),
    )
    source = DATA_BUILDERS["sources"](cfg)
    for step in range(10):
        b = source.batch_at(step)
        anchors, positives = codes_to_texts(b["anchor"]), codes_to_texts(b["positive"])
        assert len(set(anchors)) == 6  # a query's two relevant documents never share a batch
        nums = [int(p.split()[1]) for p in positives]
        for a in anchors:  # nor does another relevant document of a query in the batch (doc i + 1 of query i)
            q = int(a.split()[-1])
            assert sum(n in (q, q + 1) for n in nums) == 1
    dev = read_dev(cfg.select.dev)
    assert dev.doc_ids is not None and len(dev.documents) == 40 and all(len(r) == 2 for r in dev.relevant)
    results = run_job(cfg, tmp_path / "run")
    assert results["selected"]["metric"] == "ndcg@10" and 0 <= results["selected"]["value"] <= 1


def test_task_source_mask_leaves_out_each_querys_own_documents_only(tmp_path: Path, bert: Path) -> None:
    from contrastlab.train.job.config import TextDataConfig

    cfg = JobConfig(
        data=DataConfig(
            name="sources",
            batch_size=8,
            text=TextDataConfig(false_negatives="mask"),
            sources=SourcesConfig(datasets=(SourceConfig(path=str(_task(tmp_path)), kind="task", split="train"),)),
        ),
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=16),
        loss=LossConfig(temperature=0.5),
        eval=EvalConfig(n=4),
    )
    source = DATA_BUILDERS["sources"](cfg)
    one_way = 0
    for step in range(12):
        b = source.batch_at(step)
        queries = [int(a.split()[-1]) for a in codes_to_texts(b["anchor"])]
        docs = [int(p.split()[1]) for p in codes_to_texts(b["positive"])]
        # query q's relevant documents are q and q + 1; a query and document q + 1 of another query share it
        # one way only: document q + 1 is relevant to query q, document q is not relevant to query q + 1
        want = [[i != j and docs[j] in (queries[i], queries[i] + 1) for j in range(8)] for i in range(8)]
        assert b["false_negative"].tolist() == want
        one_way += sum(want[i][j] and not want[j][i] for i in range(8) for j in range(8))
    assert one_way > 0
