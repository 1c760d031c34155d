"""Text pairs through ``contrastlab train``: the ``text`` source, text encoders in the job, gradient caching, CLI errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from contrastlab import cli
from contrastlab.data.text.codes import codes_to_texts
from contrastlab.train import TrainConfig
from contrastlab.train.job.config import (
    DataConfig,
    EncoderConfig,
    EvalConfig,
    JobConfig,
    LossConfig,
    TextDataConfig,
    loss_registry,
    needs_negatives,
    takes_teacher_scores,
)
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import build_encoder, check_job, make_loss_fn, run_job
from contrastlab.train.job.text_dataset import NEGATIVE_LOSSES
from contrastlab.train.loop.grad_cache import cached_backward
from contrastlab.train.loop.objective import embed
from tests.models.text_models import write_tiny_bert

pytest.importorskip("sentence_transformers")
ROWS = [(f"query number {i} about topic {i % 3}", f"def answer_{i}(x)", f"def wrong_{i}()") for i in range(10)]


@pytest.fixture
def pairs_file(tmp_path: Path) -> Path:
    p = tmp_path / "pairs.tsv"
    p.write_text("".join("\t".join(r) + "\n" for r in ROWS), encoding="utf-8")
    return p


def job(pairs: Path, bert: Path, **loss: object) -> JobConfig:
    return JobConfig(
        data=DataConfig(name="text", batch_size=4, text=TextDataConfig(path=str(pairs))),
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=12),
        loss=LossConfig(**loss),  # type: ignore[arg-type]
        train=TrainConfig(steps=2, seed=1, progress=False, log_every=1, eval_every=0, checkpoint_every=0),
        eval=EvalConfig(n=3),
    )


def test_file_source_batches_hold_out_the_last_rows_and_carry_negative_columns(pairs_file: Path, bert: Path) -> None:
    cfg = job(pairs_file, bert)
    source = DATA_BUILDERS["text"](cfg)
    check_job(cfg, source)
    batch = source.batch_at(3)
    assert all(torch.equal(v, source.batch_at(3)[k]) for k, v in batch.items())  # a pure function of the step
    ids = batch["labels"].tolist()
    assert len(set(ids)) == 4 and max(ids) < 7  # rows 7, 8, 9 are held out
    assert codes_to_texts(batch["anchor"]) == [ROWS[i][0] for i in ids]
    assert codes_to_texts(batch["positive"]) == [ROWS[i][1] for i in ids]
    assert batch["negatives"].shape[:2] == (4, 1) and batch["negatives"].shape[2] == batch["anchor"].shape[1]
    assert codes_to_texts(batch["negatives"][:, 0]) == [ROWS[i][2] for i in ids]
    assert codes_to_texts(source.eval_batch["anchor"]) == [r[0] for r in ROWS[7:]]
    assert source.eval_batch["labels"].tolist() == [7, 8, 9] and "negatives" not in source.eval_batch
    assert source.provenance is not None and source.provenance["rows"] == 10


@pytest.mark.parametrize("name", sorted(loss_registry()))
def test_every_loss_trains_a_text_encoder_or_is_refused_by_name(name: str, tmp_path: Path, bert: Path) -> None:
    p = tmp_path / "pairs.jsonl"  # two columns: no negatives, so every loss that can go without them runs
    p.write_text("".join(json.dumps(list(r[:2])) + "\n" for r in ROWS), encoding="utf-8")
    cfg = job(p, bert, name=name, temperature=0.5)
    fn = loss_registry()[name]
    if needs_negatives(fn) and not takes_teacher_scores(fn):  # support_corrected says where negatives come from
        with pytest.raises(ValueError, match=rf"^loss\.name '{name}' needs negatives: data\.text\.path has no"):
            DATA_BUILDERS["text"](cfg)
        return
    source = DATA_BUILDERS["text"](cfg)
    if name in ("margin_mse", "distill_kl"):  # distillation needs a teacher's scores of negative columns
        with pytest.raises(ValueError, match=rf"^loss\.name '{name}' distils a teacher's scores; data\.name 'text'"):
            check_job(cfg, source)
        return
    check_job(cfg, source)
    torch.manual_seed(0)
    model = build_encoder(cfg, source)
    loss = make_loss_fn(cfg)(model, source.batch_at(0))
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", NEGATIVE_LOSSES)
def test_negative_columns_reach_every_loss_that_takes_negatives(name: str, pairs_file: Path, bert: Path) -> None:
    # float64 and eval mode (no dropout): the objective and the references below embed the same rows
    # alike, up to rounding (~1e-15 relative per operation; 1e-10 is far above it, far below any change)
    cfg = job(pairs_file, bert, name=name, temperature=0.5)
    source = DATA_BUILDERS["text"](cfg)
    torch.manual_seed(0)
    model = build_encoder(cfg, source).double().eval()
    objective, batch = make_loss_fn(cfg), source.batch_at(0)
    loss = objective(model, batch)
    loss.backward()
    assert torch.isfinite(loss) and batch["negatives"].shape[:2] == (4, 1)
    rows = objective.rows(batch)  # anchors, positives and the negative column in one stack
    assert rows.shape[0] == 12
    fn = loss_registry()[name]
    with torch.no_grad():
        emb = embed(model, rows)
        a, p, negs = emb[:4], emb[4:8], emb[8:].reshape(4, 1, -1)  # row i's own negative text: (N, K = 1, D)
        torch.testing.assert_close(loss.detach(), fn(a, p, negs, temperature=0.5), rtol=1e-10, atol=0)
        if not needs_negatives(fn):  # in-batch negatives
            without = objective(model, {k: v for k, v in batch.items() if k != "negatives"})
            torch.testing.assert_close(without, fn(a, p, temperature=0.5), rtol=1e-10, atol=0)


@pytest.mark.parametrize("name", ["info_nce", "dcl"])
def test_batch_negative_columns_are_every_anchors_candidates(name: str, pairs_file: Path, bert: Path) -> None:
    # data.text.negative_columns: batch is sentence-transformers' MultipleNegativesRankingLoss with hard
    # negatives: anchor i against every row's positive and negative. The reference is a loop over anchors
    # written from that definition (float64, eval mode: the same rows embedded alike, up to rounding)
    cfg = job(pairs_file, bert, name=name, temperature=0.5)
    cfg = replace(cfg, data=replace(cfg.data, text=replace(cfg.data.text, negative_columns="batch")))
    source = DATA_BUILDERS["text"](cfg)
    torch.manual_seed(0)
    model = build_encoder(cfg, source).double().eval()
    objective, batch = make_loss_fn(cfg), source.batch_at(0)
    loss = objective(model, batch)
    with torch.no_grad():
        emb = torch.nn.functional.normalize(embed(model, objective.rows(batch)), dim=-1)
        a, p, negs = emb[:4], emb[4:8], emb[8:]  # negs: row i's one negative column, (N·K, D)
        terms = []
        for i in range(4):
            others = [p[j] for j in range(4) if j != i] + list(negs)
            logits = torch.stack([a[i] @ c for c in [p[i], *others]]) / 0.5
            kept = logits if name == "info_nce" else logits[1:]  # DCL leaves the positive out of the sum
            terms.append(torch.logsumexp(kept, 0) - logits[0])
        torch.testing.assert_close(loss.detach(), torch.stack(terms).mean(), rtol=1e-10, atol=0)


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.requires_grad]  # type: ignore[union-attr]


def test_gradient_caching_replays_the_transformers_dropout(pairs_file: Path, bert: Path) -> None:
    # float64, dropout active (train mode): the cached gradient must be the gradient of the loss of the
    # embeddings the no-graph pass drew, i.e. of the mini-batches embedded in order from the same RNG state
    cfg = job(pairs_file, bert, name="info_nce", temperature=0.5)
    source = DATA_BUILDERS["text"](cfg)
    model = build_encoder(cfg, source).double().train()
    objective, batch = make_loss_fn(cfg), source.batch_at(0)
    rows, minibatch = objective.rows(batch), 5  # 4 anchors + 4 positives + 4 negatives in chunks of 5, 5, 2

    def reference(seed: int) -> tuple[float, list[torch.Tensor]]:
        torch.manual_seed(seed)
        model.zero_grad()
        loss = objective.loss(torch.cat([embed(model, c) for c in rows.split(minibatch)]), batch)
        loss.backward()
        return float(loss.detach()), _grads(model)

    ref_loss, ref = reference(7)
    torch.manual_seed(7)
    model.zero_grad()
    loss, _ = cached_backward(model, objective, batch, minibatch)
    assert abs(float(loss) - ref_loss) <= 2**-23 * abs(ref_loss)  # the returned loss is rounded to float32
    for g, r in zip(_grads(model), ref, strict=True):
        assert torch.allclose(g, r, rtol=1e-9, atol=1e-12)
    _, other = reference(8)  # other dropout masks give another gradient: the comparison above can fail
    assert any(not torch.allclose(g, r, rtol=1e-6, atol=1e-9) for g, r in zip(other, ref, strict=True))


def test_gradient_caching_equals_the_full_batch_in_eval_mode(pairs_file: Path, bert: Path) -> None:
    # without dropout, mini-batches padded to their own longest text give the full batch's gradient
    cfg = job(pairs_file, bert, name="info_nce", temperature=0.5)
    source = DATA_BUILDERS["text"](cfg)
    model = build_encoder(cfg, source).double().eval()
    objective, batch = make_loss_fn(cfg), source.batch_at(1)
    full = objective(model, batch)
    full.backward()
    ref = _grads(model)
    model.zero_grad()
    loss, _ = cached_backward(model, objective, batch, 3)
    full = full.detach()
    assert abs(float(loss) - float(full)) <= 2**-23 * abs(float(full))  # the returned loss is float32
    for g, r in zip(_grads(model), ref, strict=True):
        assert torch.allclose(g, r, rtol=1e-8, atol=1e-11)


def test_resume_continues_exactly_with_gradient_caching(pairs_file: Path, bert: Path, tmp_path: Path) -> None:
    cfg = job(pairs_file, bert, name="info_nce", temperature=0.5)
    cfg = replace(cfg, train=replace(cfg.train, steps=3, embed_minibatch=5, checkpoint_every=1))
    straight = run_job(cfg, tmp_path / "a")
    run_job(replace(cfg, train=replace(cfg.train, steps=1)), tmp_path / "b")
    resumed = run_job(cfg, tmp_path / "b", resume=True)
    assert resumed["resumed_from"] == 1
    assert resumed["metrics"] == straight["metrics"]  # dropout masks and data order replayed exactly
    assert straight["data_provenance"]["kind"] == "pairs file"


SHORT = ["--train.steps", "1", "--train.eval_every", "0", "--train.checkpoint_every", "0", "--quiet"]


def _fails_cleanly(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    assert cli.main([*argv, "--out", str(out), *SHORT]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    assert not out.exists()  # nothing written, not even the folder


def test_cli_bad_text_inputs_exit_2_with_one_line_and_write_nothing(
    pairs_file: Path, bert_job_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["train", str(bert_job_yaml), "--data.text.path", str(pairs_file)]
    out = tmp_path / "run"
    _fails_cleanly([*base, "--encoder.path", str(tmp_path / "nowhere")], out, capsys, "encoder.path", "nowhere")
    no_pool = write_tiny_bert(tmp_path / "no_pooling", "st_no_pooling")
    capsys.readouterr()  # the writer's progress bars
    _fails_cleanly(
        [*base, "--encoder.path", str(no_pool)],
        out,
        capsys,
        "encoder.path:",
        "no_pooling gives no sentence embedding",
        "not a 2-D (N, D)",
    )
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("a\tb\nc\td\te\n")
    _fails_cleanly(
        ["train", str(bert_job_yaml), "--data.text.path", str(ragged)], out, capsys, "data.text.path", "line 2"
    )
    one = tmp_path / "one.csv"
    one.write_text("only one column\n")
    _fails_cleanly(["train", str(bert_job_yaml), "--data.text.path", str(one)], out, capsys, "one.csv line 1")
    _fails_cleanly([*base, "--encoder.name", "bert"], out, capsys, "known encoders:", "minilm", "sentence_transformers")
    _fails_cleanly([*base, "--encoder.out_dim", "8"], out, capsys, "encoder.out_dim must be 16")
    _fails_cleanly([*base, "--loss.name", "nt_xent"], out, capsys, "loss.name 'nt_xent' takes no negatives")
    _fails_cleanly(
        [*base, "--loss.name", "support_corrected", "--data.text.negative_columns", "batch"],
        out,
        capsys,
        "data.text.negative_columns 'batch' needs a loss with per-candidate weights",
    )
    _fails_cleanly(["train", str(bert_job_yaml), "--data.name", "concepts"], out, capsys, "needs text data")
    assert cli.main([*base, "--out", str(out), *SHORT]) == 0, capsys.readouterr().err  # the same job, well formed
    assert json.loads((out / "results.json").read_text())["metrics"]["train_loss"] is not None
