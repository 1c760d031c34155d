"""``contrastlab audit --task``: a BEIR folder the test writes, graded metrics equal to pytrec_eval, MTEB's layout."""

import json
from pathlib import Path

import numpy as np
import pytest

from contrastlab.audit import AuditConfig
from contrastlab.audit.run import audit
from contrastlab.cli import main
from tests.models.text_models import write_tiny_bert

WORDS = ["cell", "protein", "gene", "virus", "cancer", "brain", "heart", "liver", "blood", "drug", "mouse", "dose"]


def write_task(root: Path, *, n_docs: int = 60, n_queries: int = 24, seed: int = 0) -> Path:
    """A synthetic BEIR task: documents of random words, queries naming words of one to three of them."""
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, size=8)) for _ in range(n_docs)]
    root.mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as f:
        for j, text in enumerate(docs):
            f.write(json.dumps({"_id": f"doc{j}", "title": f"T{j % 5}", "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    with (root / "queries.jsonl").open("w") as f:
        for i in range(n_queries):
            rel = rng.choice(n_docs, size=int(rng.integers(1, 4)), replace=False)
            words = {w for j in rel for w in docs[j].split()[:2]}
            f.write(json.dumps({"_id": f"q{i}", "text": " ".join(sorted(words))}) + "\n")
            lines += [f"q{i}\tdoc{j}\t{int(rng.integers(1, 3))}" for j in rel]
            lines.append(f"q{i}\tdoc{(int(rel[0]) + 1) % n_docs}\t0")  # a judged non-relevant document
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("task")
    return write_tiny_bert(base / "model", "st"), write_task(base / "toy")


def _cfg(model: Path, task: Path, **kw) -> AuditConfig:
    return AuditConfig(model=str(model), task=str(task), progress=False, n_boot=200, k_max=16, norm_words=40, **kw)


def test_task_audit_equals_pytrec_eval_on_the_models_own_run(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from sentence_transformers import SentenceTransformer

    from contrastlab.tasks import read_beir_task

    model_dir, task_dir = tiny
    res = audit(_cfg(model_dir, task_dir), tmp_path / "a")
    task = read_beir_task(task_dir, "test")
    # the oracle: embed as MTEB does with sentence-transformers itself, cosine, every document, pytrec_eval
    st = SentenceTransformer(str(model_dir), device="cpu")
    q = st.encode(list(task.query_texts), normalize_embeddings=True)
    d = st.encode(list(task.doc_texts), normalize_embeddings=True)
    scores = q @ d.T
    run = {
        qid: {did: float(s) for did, s in zip(task.doc_ids, row, strict=True)}
        for qid, row in zip(task.query_ids, scores, strict=True)
    }
    measures = {"ndcg_cut.10", "map_cut.100", "recall.5", "P.3"}
    oracle = pytrec_eval.RelevanceEvaluator({k: dict(v) for k, v in task.qrels.items()}, measures).evaluate(run)
    per = res["per_query"]
    assert per["query_ids"] == list(task.query_ids)
    # two encoders of the same weights (ours in length-sorted batches, faiss's products) agree to a few float32
    # ulps (~1e-7 at cosines near 1); the data are such that no two distinct scores of a query are closer than
    # 1e-6, so both rankings are the same and the comparison is exact (checked, not assumed)
    gaps = np.diff(np.sort(scores, axis=1), axis=1)
    assert gaps[gaps > 0].min() > 1e-6
    for key in ("ndcg_cut_10", "map_cut_100", "recall_5", "P_3"):
        ours = np.asarray(per[key])
        ref = np.array([oracle[qid][key] for qid in task.query_ids])
        np.testing.assert_allclose(ours, ref, atol=1e-12, rtol=0)
    for key, name in (("ndcg_cut_10", "ndcg_at_10"), ("map_cut_100", "map_at_100"), ("P_3", "precision_at_3")):
        assert res["metrics"][name] == pytest.approx(np.mean([oracle[q][key] for q in task.query_ids]), abs=1e-12)


def test_task_audit_writes_mteb_layout_and_cross_fitted_tau(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    model_dir, task_dir = tiny
    out = tmp_path / "b"
    res = audit(_cfg(model_dir, task_dir), out)
    mteb = json.loads((out / "mteb_results.json").read_text())
    scores = mteb["scores"]["test"][0]
    assert scores["main_score"] == scores["ndcg_at_10"] == res["metrics"]["ndcg_at_10"]
    for name in ("ndcg_at_1000", "map_at_100", "recall_at_100", "precision_at_1", "mrr_at_10"):
        assert 0.0 <= scores[name] <= 1.0
    assert mteb["comparable"] is True
    soft = res["softmax_search"]
    assert soft["fit_on"] == "other fold"
    folds = np.asarray(soft["query_fold"])
    assert 0 < folds.sum() < folds.size
    # each query is scored at the other fold's τ
    assert res["metrics"]["tau_star_fold_a"] == soft["taus"][0]
    lo, mean, hi = (res["intervals"]["ndcg_at_10"][i] for i in (1, 0, 2))
    assert lo <= mean <= hi
    assert (out / "results.json").is_file() and (out / "report.html").is_file()
    assert res["task"]["name"] == "toy" and res["task"]["split"] == "test"
    # the report names the folder the audit was moved into, not the staging folder it was written in
    report = (out / "report.md").read_text()
    assert f"folder `{out}`" in report and f".{out.name}-" not in report


def test_task_audit_on_a_subset_says_it_is_not_comparable(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    model_dir, task_dir = tiny
    res = audit(_cfg(model_dir, task_dir, max_queries=10, max_documents=30), tmp_path / "c")
    assert len(res["per_query"]["query_ids"]) == 10
    assert res["metrics"]["num_documents"] == 30
    assert "not comparable" in res["summary"]
    assert json.loads((tmp_path / "c" / "mteb_results.json").read_text())["comparable"] is False


def test_task_cli_bad_input_is_one_line_and_nothing_written(
    tiny: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir, task_dir = tiny
    out = tmp_path / "bad"
    no_judgements = tmp_path / "header-only"  # a split whose qrels file is its header alone
    no_judgements.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        (no_judgements / name).write_text((task_dir / name).read_text())
    (no_judgements / "qrels").mkdir()
    (no_judgements / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    for argv, expected in (
        (["--task", str(task_dir), "--split", "dev"], "split: 'dev' is not a split"),
        (["--task", str(tmp_path / "nowhere")], "is not a folder"),
        (["--task", str(task_dir), "--pairs", str(task_dir / "corpus.jsonl")], "pairs: give a task or a pairs file"),
        (["--task", str(no_judgements)], f"split: 'test' of {no_judgements} has no queries: "),
    ):
        code = main(["audit", str(model_dir), *argv, "--out", str(out), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and expected in err and "\n" not in err
        assert not out.exists()


def test_task_audit_on_the_dev_part_of_the_holdout(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    from contrastlab.tasks import holdout, read_beir_task

    model_dir, task_dir = tiny
    res = audit(_cfg(model_dir, task_dir, task_part="dev", task_dev_fraction=0.3), tmp_path / "d")
    _, dev = holdout(read_beir_task(task_dir, "test"), 0.3, seed=0)
    assert res["per_query"]["query_ids"] == list(dev.query_ids)
    assert res["task"]["name"] == "toy/dev-part"
    assert res["metrics"]["num_documents"] == 60  # the whole corpus is searched


def test_task_audit_compress_runs_on_the_relevant_pairs(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    model_dir, task_dir = tiny
    res = audit(_cfg(model_dir, task_dir, compress=True, compress_widths=(8,)), tmp_path / "z")
    rows = res["compression"]["rows"]
    n_pairs = int(res["metrics"]["num_relevant_pairs"])
    assert {(r["width"], r["storage"]) for r in rows} >= {(16, "float32"), (8, "float32"), (16, "int8")}
    assert all(r["metrics"]["recall@1"]["n"] == n_pairs for r in rows)
    assert (tmp_path / "z" / "compression.png").is_file()


def test_a_task_without_relevant_documents_is_refused(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    model_dir, task_dir = tiny
    root = tmp_path / "zero"
    root.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        (root / name).write_text((task_dir / name).read_text())
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tdoc1\t0\n")
    with pytest.raises(ValueError, match="has a document of grade > 0"):
        audit(_cfg(model_dir, root), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_n_boot_sets_the_retrieval_intervals_as_its_help_says(
    tiny: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("--n_boot"))
    assert "retrieval" in line and "norm correlations" in line and "cross-entropy" in line
    # one resample: each retrieval interval is the mean of that one resample, both its ends
    model_dir, task_dir = tiny
    cfg = AuditConfig(model=str(model_dir), task=str(task_dir), progress=False, n_boot=1, k_max=16, norm_words=40)
    res = audit(cfg, tmp_path / "one")
    for name in ("ndcg_at_10", "map_at_100", "recall_at_100", "mrr_at_10"):
        assert res["intervals"][name][1] == res["intervals"][name][2]
