"""Duplicates and a query's other relevant documents kept out of the negatives of ``contrastlab train``'s text source."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from contrastlab.config import ConfigError
from contrastlab.data.text.codes import codes_to_texts
from contrastlab.data.text.conflict_free import false_negative_mask
from contrastlab.train import TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig, TextDataConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import build_encoder, make_loss_fn
from contrastlab.train.job.text_dataset import row_keys
from contrastlab.train.loop.objective import embed
from tests.data.text.dropped_columns import loss_without_columns

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

# relevance shared one way: query zero's documents are "first answer" and "second answer", query one's is
# "Second answer" alone and query two's "first answer" alone, so with rows (query zero, first answer) and
# (query one, second answer) in a batch, "second answer" is a false negative of query zero while "first
# answer" is a true negative of query one; query three's document is query four's text
SHARED_ONE_WAY = [
    ("query zero", "first answer"),
    ("query zero", "second answer"),
    ("query one", "Second  answer"),
    ("query two", "first answer"),
    ("query three", "Query four"),
    ("query four", "fourth answer"),
    ("query five", "fifth answer"),
    ("query five", "sixth answer"),
    ("query six", "sixth answer"),
    *[(f"query {i} alone", f"answer {i} alone") for i in range(7, 18)],
    ("held out a", "held answer a"),
    ("held out b", "held answer b"),
]


def job(tmp_path: Path, bert: Path, mode: str, rows: list[tuple[str, str]] = ROWS, **loss: object) -> JobConfig:
    p = tmp_path / "pairs.tsv"
    p.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
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
    from contrastlab.data.text.pairs import TextPairs

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


def _norm(t: str) -> str:
    return " ".join(t.lower().split())


def _false_negatives(pairs: list[tuple[str, str]], rows: list[tuple[str, str]]) -> list[list[bool]]:
    """The rule, written from the texts: column j is a false negative of anchor i (j ≠ i) when pair j's
    positive is, after lower-casing and white space, anchor i's text, anchor i's positive, or another document
    relevant to anchor i's query (a positive of a training row with that query)."""
    relevant: dict[str, set[str]] = {}
    for q, d in rows:
        relevant.setdefault(_norm(q), set()).add(_norm(d))
    n = len(pairs)
    return [
        [j != i and _norm(pairs[j][1]) in {_norm(pairs[i][0]), _norm(pairs[i][1]), *relevant[_norm(pairs[i][0])]}
         for j in range(n)]
        for i in range(n)
    ]  # fmt: skip


def test_mask_marks_each_anchors_false_negatives_and_the_loss_leaves_exactly_those_out(
    tmp_path: Path, bert: Path
) -> None:
    cfg = job(tmp_path, bert, "mask", SHARED_ONE_WAY, temperature=0.5)
    source = DATA_BUILDERS["text"](cfg)
    model = build_encoder(cfg, source).double().eval()
    objective = make_loss_fn(cfg)
    train_rows = SHARED_ONE_WAY[:-2]
    one_way = 0
    for step in range(12):
        b = source.batch_at(step)
        pairs = list(zip(codes_to_texts(b["anchor"]), codes_to_texts(b["positive"]), strict=True))
        want = _false_negatives(pairs, train_rows)
        assert b["false_negative"].tolist() == want
        assert torch.equal(b["false_negative"], false_negative_mask(*_keys_of(cfg, b)))
        one_way += sum(want[i][j] and not want[j][i] for i in range(6) for j in range(6))
        with torch.no_grad():
            emb = embed(model, objective.inputs(b))
            got = float(objective.loss(emb, b))
        expected = loss_without_columns(emb[:6], emb[6:], want, 0.5)
        assert abs(got - expected) <= 1e-12 * max(1.0, abs(expected)), step
    assert one_way > 0  # some batch held a false negative of one anchor that is a true negative of the other


def test_mask_and_sampler_agree_on_duplicates_and_a_querys_documents(tmp_path: Path, bert: Path) -> None:
    source = DATA_BUILDERS["text"](job(tmp_path, bert, "mask"))
    found = False
    for step in range(12):
        b = source.batch_at(step)
        pairs = list(zip(codes_to_texts(b["anchor"]), codes_to_texts(b["positive"]), strict=True))
        assert b["false_negative"].tolist() == _false_negatives(pairs, ROWS[:-2])
        found |= bool(b["false_negative"].any())
    assert found  # some batch of the plain sampler had a false negative to mask


def _keys_of(cfg: JobConfig, b: dict[str, torch.Tensor]) -> tuple[list[int], list[int], list[tuple[int, ...]]]:
    from contrastlab.data.text.pairs import TextPairs

    own, prot = row_keys(cfg, TextPairs(tuple(SHARED_ONE_WAY[:-2])))
    rows = b["labels"].tolist()
    return [own[i][0] for i in rows], [own[i][1] for i in rows], [prot[i] for i in rows]


def test_mask_needs_a_loss_with_weights(tmp_path: Path, bert: Path) -> None:
    with pytest.raises(ConfigError, match="data.text.false_negatives"):
        DATA_BUILDERS["text"](job(tmp_path, bert, "mask", name="nt_xent"))
    with pytest.raises(ConfigError, match="data.text.false_negatives"):
        DATA_BUILDERS["text"](job(tmp_path, bert, "mask", symmetric=True))
