"""A teacher's scores of a pairs file: written by ``contrastlab mine --teacher``, read and checked by the text source."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab import cli
from contrastlab.config import from_dict
from contrastlab.data.text.pairs import read_text_pairs
from contrastlab.data.text.teacher_scores import (
    read_teacher_scores,
    row_id,
    score_rows,
    scores_path,
    write_teacher_scores,
)
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import make_loss_fn, run_job
from tests.models.text_models import write_tiny_bert


def _fake_embed(texts: list[str]) -> torch.Tensor:
    """A deterministic embedding of each text (seeded by its hash), D = 5."""
    rows = []
    for t in texts:
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
        rows.append(torch.randn(5, generator=torch.Generator().manual_seed(seed)))
    return torch.stack(rows)


ROWS = [(f"q{i}", f"pos{i}", f"neg{i}a", f"neg{(i + 1) % 5}a") for i in range(5)]


def test_scores_are_the_cosines_of_each_rows_candidates() -> None:
    got = score_rows(_fake_embed, ROWS, batch_size=3)  # blocks of 3 distinct texts
    for i, row in enumerate(ROWS):
        e = _fake_embed(list(row)).double()
        want = [float(torch.nn.functional.cosine_similarity(e[0], e[j], dim=0)) for j in range(1, 4)]
        np.testing.assert_allclose(got[i], want, rtol=0, atol=1e-6)  # float32 cosines
    assert got.shape == (5, 3) and got.dtype == np.float32


def test_the_file_round_trips_and_refuses_another_pairs_file(tmp_path: Path) -> None:
    scores = score_rows(_fake_embed, ROWS)
    path = write_teacher_scores(tmp_path / "p.tsv.teacher.jsonl", ROWS, scores, "fake")
    np.testing.assert_array_equal(read_teacher_scores(path, ROWS), scores)
    with pytest.raises(ValueError, match=r"holds scores of 5 rows, the pairs file has 4$"):
        read_teacher_scores(path, ROWS[:4])
    swapped = [ROWS[1], ROWS[0], *ROWS[2:]]
    with pytest.raises(ValueError, match=rf"line 2: id '{row_id(ROWS[0])}' is not the id of pairs row 1"):
        read_teacher_scores(path, swapped)
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], text[1].replace("0.", "1.", 1), *text[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"p\.tsv\.teacher\.jsonl:2"):
        read_teacher_scores(path, ROWS)


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A pairs file mined by a tiny BERT with the same tiny BERT as the teacher."""
    pytest.importorskip("sentence_transformers")
    root = tmp_path_factory.mktemp("teacher")
    bert = write_tiny_bert(root / "st", "st")
    pairs = root / "pairs.tsv"
    pairs.write_text("".join(f"query {i} on topic {i % 4}\tanswer {i} about {i % 4}\n" for i in range(16)))
    out = root / "mined.tsv"
    argv = ["mine", str(bert), "--pairs", str(pairs), "--out", str(out), "--quiet", "--num_negatives", "2"]
    assert cli.main([*argv, "--teacher", str(bert)]) == 0
    return bert, out


def test_mine_writes_the_teachers_scores_of_the_rows_it_writes(mined) -> None:
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.inputs import encode_texts, load_model

    bert, out = mined
    rows = read_text_pairs(out).rows
    got = read_teacher_scores(scores_path(out), rows)
    teacher = load_model(AuditConfig(model=str(bert), progress=False))
    want = score_rows(lambda t: encode_texts(teacher, t, batch_size=len(t), progress=False, label="t"), rows)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)  # the same model; batches padded differently
    header = json.loads(scores_path(out).read_text().splitlines()[0])
    assert header["teacher"] == str(bert) and header["rows"] == len(rows) and header["candidates"] == 3


def _job(bert: Path, pairs: Path, loss: str = "margin_mse", scores: Path | None = None) -> dict:
    return {
        "data": {"name": "text", "batch_size": 4,
                 "text": {"path": str(pairs), "teacher_scores": str(scores or scores_path(pairs)),
                          "false_negatives": "off"}},  # mined negatives are other rows' positives
        "encoder": {"name": "sentence_transformers", "path": str(bert), "out_dim": 16, "max_seq_length": 12},
        "loss": {"name": loss, "normalize": True, "temperature": 1.0},
        "train": {"steps": 2, "seed": 1, "progress": False, "log_every": 1},
        "eval": {"n": 4},
    }  # fmt: skip


@pytest.mark.parametrize("loss", ["margin_mse", "distill_kl"])
def test_a_distillation_run_reads_the_scores_with_its_batches(mined, tmp_path: Path, loss: str) -> None:
    bert, out = mined
    cfg = from_dict(JobConfig, _job(bert, out, loss))
    source = DATA_BUILDERS["text"](cfg)
    scores = read_teacher_scores(scores_path(out), read_text_pairs(out).rows)
    batch = source.batch_at(1)
    rows = batch["labels"].tolist()  # the pairs rows of this batch
    assert torch.equal(batch["teacher_scores"], torch.from_numpy(scores[rows]))
    assert batch["negatives"].shape[:2] == (4, 2)
    results = run_job(cfg, tmp_path / "run")
    assert np.isfinite(results["metrics"]["train_loss"]) and "eval_loss" not in results["metrics"]
    assert "Held-out: loss not computed, alignment " in results["summary"] and "nan" not in results["summary"]
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    digest = hashlib.sha256(scores_path(out).read_bytes()).hexdigest()
    assert f"- teacher scores: `{scores_path(out)}` (teacher `{bert}`, sha256 `{digest}`)" in card
    assert "- candidates: each row's positive and its 2 negative column(s), scored by the teacher" in card
    from contrastlab.train.job.runner import build_encoder

    model = build_encoder(cfg, source)
    assert torch.isfinite(make_loss_fn(cfg)(model, batch))


def test_scores_that_do_not_fit_are_one_line_naming_the_field(mined, tmp_path: Path, capsys) -> None:
    bert, out = mined
    other = tmp_path / "other.tsv"
    rows = read_text_pairs(out).rows
    other.write_text("".join("\t".join(r) + "\n" for r in rows[1:]))  # one row fewer
    job = tmp_path / "job.json"
    cases = [
        (_job(bert, other, scores=scores_path(out)), "data.text.teacher_scores: ", f"the pairs file has {len(rows) - 1}"),
        (_job(bert, out, "info_nce"), "data.text.teacher_scores is set, but loss.name 'info_nce' does not distil", ""),
        ({**_job(bert, out), "data": {"name": "text", "batch_size": 4, "text": {"path": str(out)}}},
         "loss.name 'margin_mse' distils a teacher's scores of the 2 negative column(s); set data.text.teacher_scores", ""),
    ]  # fmt: skip
    for data, needle, detail in cases:
        job.write_text(json.dumps(data))
        capsys.readouterr()
        assert cli.main(["train", str(job), "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and detail in err, err
        assert not (tmp_path / "run").exists()


def test_mine_with_a_teacher_that_does_not_load_writes_nothing(mined, tmp_path: Path, capsys) -> None:
    bert, out = mined
    pairs = out.parent / "pairs.tsv"
    target = tmp_path / "again.tsv"
    argv = ["mine", str(bert), "--pairs", str(pairs), "--out", str(target), "--quiet", "--num_negatives", "2"]
    capsys.readouterr()
    assert cli.main([*argv, "--teacher", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mine: teacher: "), err
    assert not target.exists() and not scores_path(target).exists()
    assert cli.main([*argv, "--teacher", str(bert), "--output_format", "triplet"]) == 2
    assert "teacher must be a model (not .npy) and output_format n-tuple" in capsys.readouterr().err
