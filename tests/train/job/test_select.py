"""Checkpoint selection by a dev metric, early stopping, exact resume, the exported model, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab import cli
from contrastlab.config import ConfigError, from_dict
from contrastlab.search.metrics import mrr, ndcg_at_k, recall_at_k
from contrastlab.train import TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig, TextDataConfig
from contrastlab.train.job.dev_metrics import dev_from_pairs, retrieval_metrics
from contrastlab.train.job.runner import run_job
from contrastlab.train.job.select import SelectConfig, Selector
from contrastlab.train.loop.checkpoint import latest_checkpoint
from tests.train.job._text_files import write_pairs

pytest.importorskip("sentence_transformers")
ROWS = [(f"question {i} on subject {i % 4}", f"reply {i} on subject {i % 4} with detail {i * 7}") for i in range(24)]


def job(tmp_path: Path, bert: Path, **select: object) -> JobConfig:
    p = write_pairs(tmp_path / "pairs.tsv", ROWS)
    return JobConfig(
        data=DataConfig(name="text", batch_size=4, text=TextDataConfig(path=str(p))),
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=16),
        loss=LossConfig(temperature=0.5),
        train=TrainConfig(steps=8, seed=2, progress=False, log_every=1, eval_every=2, checkpoint_every=1),
        eval=EvalConfig(n=8),
        select=SelectConfig(**select),  # type: ignore[arg-type]
    )


def test_retrieval_metrics_equal_the_binary_metrics_of_search_metrics() -> None:
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(7, 5, generator=g, dtype=torch.float64), torch.randn(11, 5, generator=g, dtype=torch.float64)
    relevant = [{i % 11: 1, (3 * i + 1) % 11: 1} for i in range(7)]
    got = retrieval_metrics(q, d, relevant, ["ndcg@3", "recall@5", "mrr@4"], normalize=True)
    s = torch.nn.functional.normalize(q, dim=1) @ torch.nn.functional.normalize(d, dim=1).T
    order = torch.argsort(-s, dim=1).numpy()  # no ties in random scores
    hits = np.array([[int(j) in relevant[i] for j in order[i]] for i in range(7)])
    n_rel = np.array([len(r) for r in relevant])
    assert math.isclose(got["ndcg@3"], float(ndcg_at_k(hits, n_rel, 3)), rel_tol=1e-12)
    assert math.isclose(got["recall@5"], float(recall_at_k(hits, n_rel, 5, mode="fraction")), rel_tol=1e-12)
    assert math.isclose(got["mrr@4"], float(mrr(hits[:, :4], n_rel)), rel_tol=1e-12)


def test_graded_ndcg_by_hand() -> None:
    q = torch.tensor([[1.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])  # ranked 0, 1, 2
    got = retrieval_metrics(q, d, [{1: 2, 2: 1}], ["ndcg@2"], normalize=True)["ndcg@2"]
    want = (2 / math.log2(3)) / (2 / math.log2(2) + 1 / math.log2(3))
    assert math.isclose(got, want, rel_tol=1e-12)


def test_dev_from_pairs_groups_rows_by_query() -> None:
    dev = dev_from_pairs([("q", "a"), ("q", "b", "n"), ("r", "a")], "x")
    assert dev.queries == ("q", "r") and dev.documents == ("a", "b", "n")
    assert dev.relevant == ({0: 1, 1: 1}, {0: 1})


def test_selector_keeps_the_best_and_stops_after_patience() -> None:
    model = torch.nn.Linear(2, 2)
    sel = Selector(SelectConfig(metric="ndcg@10", mode="max", patience=2), model)
    for step, value in [(2, 0.3), (4, 0.5), (6, 0.4), (8, 0.45)]:
        with torch.no_grad():
            model.weight.fill_(float(step))  # the weights of that step
        sel.update(step, {"ndcg@10": value})
    assert sel.best_step == 4 and sel.since_best == 2 and sel.should_stop()
    sel.update(8, {"ndcg@10": 0.9})  # a step already recorded is ignored
    assert sel.best_step == 4
    assert sel.load_best() == 4 and float(model.weight.detach()[0, 0]) == 4.0
    low = Selector(SelectConfig(metric="loss", mode="min"), model)
    for step, value in [(1, 3.0), (2, 2.0), (3, 2.5)]:
        low.update(step, {"loss": value})
    assert low.best_step == 2 and not low.should_stop()
    with pytest.raises(ValueError, match="select.metric 'loss'"):
        Selector(SelectConfig(metric="loss"), model).update(1, {"loss": float("nan")})


def test_export_is_the_selected_step_and_resume_selects_as_the_uninterrupted_run(tmp_path: Path, bert: Path) -> None:
    cfg = job(tmp_path, bert, metric="ndcg@10", mode="max", patience=2)
    straight = run_job(cfg, tmp_path / "a")
    sel = straight["selected"]
    assert sel["metric"] == "ndcg@10" and sel["step"] in (2, 4, 6, 8)
    evals = {r["step"]: r["eval/ndcg@10"] for r in _history(tmp_path / "a")}
    best = max(evals.values())
    assert (
        sel["value"] == best
        and evals[sel["step"]] == best
        and min(s for s, v in evals.items() if v == best) == sel["step"]
    )
    about = json.loads((tmp_path / "a" / "model" / "contrastlab.json").read_text())
    assert about["step"] == sel["step"]  # the exported model is the selected one, and says which step
    state = latest_checkpoint(tmp_path / "a")
    assert state is not None and state["extra"]["select"]["best_step"] == sel["step"]
    exported = _st_embed(tmp_path / "a" / "model", ["question 1 on subject 1"])
    from contrastlab.train.job.export import run_text_encoder

    enc, _, step = run_text_encoder(tmp_path / "a")
    assert step == sel["step"]
    with torch.no_grad():
        ours = torch.nn.functional.normalize(enc.embed_texts(["question 1 on subject 1"]), dim=1)
    torch.testing.assert_close(torch.as_tensor(exported), ours, rtol=0, atol=1e-6)
    for crash_at in (3, 5):  # a crash between evaluations and just after one
        _crash_at(cfg, tmp_path / f"b{crash_at}", crash_at)
        resumed = run_job(cfg, tmp_path / f"b{crash_at}", resume=True)
        assert resumed["resumed_from"] == crash_at
        assert resumed["selected"] == sel
        assert resumed["metrics"] == straight["metrics"]


class _Crash(RuntimeError):
    pass


def _crash_at(cfg: JobConfig, out: Path, step: int) -> None:
    """Run ``cfg`` until its data source raises when asked for the batch of ``step`` (checkpoints every step)."""
    from contrastlab.train.job import runner as job_module

    real = job_module.build_source

    def crashing(config: JobConfig):  # type: ignore[no-untyped-def]
        source = real(config)
        inner = source.batch_at

        def batch_at(s: int):  # type: ignore[no-untyped-def]
            if s == step:
                raise _Crash(s)
            return inner(s)

        source.batch_at = batch_at
        return source

    job_module.build_source = crashing  # type: ignore[assignment]
    try:
        with pytest.raises(_Crash):
            run_job(cfg, out)
    finally:
        job_module.build_source = real  # type: ignore[assignment]


def test_early_stop_ends_the_run_and_a_resume_stays_stopped(tmp_path: Path, bert: Path) -> None:
    cfg = job(tmp_path, bert, metric="loss", mode="max", patience=1)  # the loss falls: "max" stops early
    first = run_job(cfg, tmp_path / "a")
    sel = first["selected"]
    assert sel["stopped_early"] and sel["last_step"] < 8 and sel["step"] < sel["last_step"]
    again = run_job(cfg, tmp_path / "a", resume=True)
    assert again["selected"] == sel


def _history(run: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "eval/ndcg@10" in r]


def _st_embed(folder: Path, texts: list[str], **kw: object) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(
        texts, convert_to_numpy=True, normalize_embeddings=True, **kw
    )


def test_bad_select_input_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^select\.metric 'ndcg10' is not a metric"):
        from_dict(JobConfig, {"select": {"metric": "ndcg10"}})
    with pytest.raises(ConfigError, match=r"^select\.patience \(3\) needs train\.eval_every"):
        from_dict(JobConfig, {"select": {"metric": "loss", "patience": 3}})
    with pytest.raises(ConfigError, match=r"^prompts\.query: encoder 'mlp' has no text columns"):
        from_dict(JobConfig, {"prompts": {"query": "query: "}})
    with pytest.raises(ConfigError, match=r"^select\.dev\.path must name a BEIR folder"):
        from_dict(JobConfig, {"select": {"metric": "loss", "dev": {"kind": "task"}}})


SHORT = ["--train.steps", "1", "--train.checkpoint_every", "0", "--quiet"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--select.metric", "ndcg"], "select.metric 'ndcg' is not a metric"),
        (["--select.metric", "loss", "--select.patience", "2", "--train.eval_every", "0"], "select.patience (2) needs"),
        (["--encoder.name", "mlp", "--encoder.path", "null", "--prompts.query", "q: "], "prompts.query"),
    ],
)
def test_cli_bad_select_and_prompts_exit_2_with_one_line(
    args: list[str], needle: str, tmp_path: Path, bert_job_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", str(bert_job_yaml), *args, "--out", str(out), *SHORT]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and needle in err, err
    assert not out.exists()


def test_the_practitioners_five_line_config_reads(tmp_path: Path) -> None:
    from contrastlab.config import read_config

    p = tmp_path / "job.yaml"
    p.write_text(
        "data: {name: sources, batch_size: 32, sources: {datasets: [{kind: task, path: scifact-train, split: train, "
        "part: train}]}}\n"
        "encoder: {name: minilm, out_dim: 384, max_seq_length: 256}\n"
        "train: {steps: 200, eval_every: 20, checkpoint_every: 20, optim: {name: adamw, lr: 2.0e-5}}\n"
        "select: {metric: ndcg@10, mode: max, patience: 3, dev: {kind: task, path: scifact-train, split: train, "
        "part: dev}}\n"
        'prompts: {query: "query: ", document: "passage: "}\n'
    )
    cfg = read_config(JobConfig, p)
    assert cfg.data.text.false_negatives == "sampler" and cfg.select.dev.part == "dev"
    assert cfg.data.sources.datasets[0].part == "train" and cfg.prompts.query == "query: "
