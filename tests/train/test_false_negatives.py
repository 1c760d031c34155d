"""Duplicates and a query's other relevant documents kept out of the negatives of ``contrastlab train``'s text source."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from contrastlab.data.conflict_free import false_negative_mask
from contrastlab.data.text_codes import codes_to_texts
from contrastlab.losses import info_nce
from contrastlab.train import TrainConfig
from contrastlab.train.dataconf import ConfigError
from contrastlab.train.job import build_encoder, make_loss_fn
from contrastlab.train.job_config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig, TextDataConfig
from contrastlab.train.objective import embed
from contrastlab.train.sources import DATA_BUILDERS
from contrastlab.train.texts import row_keys
from tests.models.text_models import write_tiny_bert

pytest.importorskip("sentence_transformers")

# query 0 has three relevant documents; doc "shared answer" is relevant to queries 1 and 2; "Same  Text" and
# "same text" are one text to an uncased WordPiece tokenizer
ROWS = [
    ("query zero", "first answer"),
    ("query zero", "second answer"),
    ("query zero", "third answer"),
    ("query one", "shared answer"),
    ("query two", "Shared   answer"),
    ("query three", "same text"),
    ("query four", "Same  Text"),
    *[(f"query {i} alone", f"answer {i} alone") for i in range(5, 20)],
    ("held out a", "held answer a"),
    ("held out b", "held answer b"),
]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("models") / "st", "st")


def job(tmp_path: Path, bert: Path, mode: str, **loss: object) -> JobConfig:
    p = tmp_path / "pairs.tsv"
    p.write_text("".join("\t".join(r) + "\n" for r in ROWS), encoding="utf-8")
    return JobConfig(
        data=DataConfig(name="text", batch_size=6, text=TextDataConfig(path=str(p), false_negatives=mode)),  # type: ignore[arg-type]
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=12),
        loss=LossConfig(**loss),  # type: ignore[arg-type]
        train=TrainConfig(steps=2, seed=1, progress=False, log_every=1),
        eval=EvalConfig(n=2),
    )


def _bad(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """The pairs a and b must not share a batch: a common text after lower-casing and white space, or a
    common query (its other relevant documents would be negatives)."""

    def norm(t: str) -> str:
        return " ".join(t.lower().split())

    return bool({norm(a[0]), norm(a[1])} & {norm(b[0]), norm(b[1])})


def test_keys_join_texts_the_tokenizer_makes_equal_and_protect_a_querys_documents(tmp_path: Path, bert: Path) -> None:
    cfg = job(tmp_path, bert, "sampler")
    from contrastlab.data.text_pairs import TextPairs

    own, protected = row_keys(cfg, TextPairs(tuple(ROWS)))
    assert own[3][1] == own[4][1] and own[5][1] == own[6][1]  # one key for texts the tokenizer makes equal
    assert own[0][1] != own[1][1] and own[0][0] == own[1][0] == own[2][0]
    assert set(protected[0]) == {own[0][1], own[1][1], own[2][1]}


def test_sampler_never_batches_a_false_negative(tmp_path: Path, bert: Path) -> None:
    source = DATA_BUILDERS["text"](job(tmp_path, bert, "sampler"))
    for step in range(30):
        b = source.batch_at(step)
        pairs = list(zip(codes_to_texts(b["anchor"]), codes_to_texts(b["positive"]), strict=True))
        assert len(pairs) == 6 and "false_negative" not in b
        assert not any(_bad(pairs[i], pairs[j]) for i in range(6) for j in range(i + 1, 6))
    cfg = job(tmp_path, bert, "sampler")
    with pytest.raises(ConfigError, match="data.batch_size"):  # 21 rows, but query zero's three need 3 batches
        DATA_BUILDERS["text"](replace(cfg, data=replace(cfg.data, batch_size=19)))


def test_mask_marks_every_false_negative_and_the_loss_leaves_those_columns_out(tmp_path: Path, bert: Path) -> None:
    cfg = job(tmp_path, bert, "mask", temperature=0.5)
    source = DATA_BUILDERS["text"](cfg)
    found = False
    for step in range(12):
        b = source.batch_at(step)
        pairs = list(zip(codes_to_texts(b["anchor"]), codes_to_texts(b["positive"]), strict=True))
        want = [[i != j and _bad(pairs[i], pairs[j]) for j in range(6)] for i in range(6)]
        assert b["false_negative"].tolist() == want
        found |= any(map(any, want))
    assert found  # some batch of the plain sampler had a false negative to mask
    model = build_encoder(cfg, source).double().eval()
    objective = make_loss_fn(cfg)
    b = next(source.batch_at(s) for s in range(12) if source.batch_at(s)["false_negative"].any())
    with torch.no_grad():
        emb = embed(model, objective.inputs(b))
        got = objective.loss(emb, b)
        n = 6
        want = info_nce(emb[:n], emb[n:], temperature=0.5, weights=(~b["false_negative"]).double())
        unmasked = info_nce(emb[:n], emb[n:], temperature=0.5)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(got, unmasked)  # the mask changed the loss
    assert torch.equal(b["false_negative"], false_negative_mask(*_keys_of(cfg, b)))


def _keys_of(cfg: JobConfig, b: dict[str, torch.Tensor]) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    from contrastlab.data.text_pairs import TextPairs

    own, prot = row_keys(cfg, TextPairs(tuple(ROWS[:-2])))
    return [own[i] for i in b["labels"].tolist()], [prot[i] for i in b["labels"].tolist()]


def test_mask_needs_a_loss_with_weights(tmp_path: Path, bert: Path) -> None:
    with pytest.raises(ConfigError, match="data.text.false_negatives"):
        DATA_BUILDERS["text"](job(tmp_path, bert, "mask", name="nt_xent"))
    with pytest.raises(ConfigError, match="data.text.false_negatives"):
        DATA_BUILDERS["text"](job(tmp_path, bert, "mask", symmetric=True))
