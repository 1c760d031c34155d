"""``contrastlab mine``: hard negatives for a pairs file, written as a pairs file with negative columns.

Reads (anchor, positive) rows (:func:`~contrastlab.data.text.pairs.read_text_pairs`: TSV, CSV, JSONL or a
saved dataset folder) and a model — the bundled ``minilm``, a sentence-transformers or Hugging Face
folder, a name in the local Hugging Face cache (:func:`~contrastlab.audit.inputs.load_model`), or a
``.npy`` of ``(2P, D)`` embeddings (the P anchors, then their P positives, in the file's order) — and
mines each anchor's hard negatives among the file's distinct positives (the corpus) through an exact
cosine :class:`~contrastlab.search.EmbeddingIndex` and
:func:`~contrastlab.search.mining.mine_hard_negatives`. A text run of ``contrastlab train`` is a model
too. Texts are truncated at the model's own ``max_seq_length`` and get the prompts the model records (a
text run's or its model folder's, :func:`~contrastlab.audit.recorded_prompts.resolve_prompts`) unless
``max_seq_length``, ``query_prompt`` or ``document_prompt`` say otherwise.

It follows sentence-transformers' ``mine_hard_negatives`` (6.2.0) option for option: rows with the same
anchor text are one query whose positives are all excluded and whose margins use its lowest positive
score; ``range_max`` nearest non-positive documents are searched (default ``range_min + num_negatives + P``,
or ``range_min + 10·num_negatives + P`` when a margin or ``max_score`` is set, P the most positives of
one anchor); ``margin``
(its ``absolute_margin``), ``relative_margin``, ``max_score`` and ``min_score`` drop candidates;
``range_min`` survivors are skipped; ``sampling`` ``top`` takes the next ``num_negatives`` and ``random``
draws them (Python's ``random.Random(seed)``, one draw per query in order, as it draws from the global
``random``). ``output_format`` ``n-tuple`` writes ``anchor, positive, negative_1 … negative_K`` for the
rows whose anchor kept all K; ``triplet`` writes one ``anchor, positive, negative`` row per negative
found. ``contrastlab train`` (``data.text.path``) and the sentence-transformers bridge read the output as
it is. With ``teacher`` a second model scores each written row's positive and negatives (cosine), written
to ``OUT.teacher.jsonl`` (:mod:`contrastlab.data.text.teacher_scores`) for the distillation losses
(``data.text.teacher_scores``).

One filter is contrastlab's own: ``max_probability`` drops a candidate c whose softmax-search probability
``P(c | a) = exp(s(a, c)/τ) / Σ_j exp(s(a, j)/τ)`` over the **whole** corpus (the exact log-partition)
exceeds the threshold, at the model's temperature ``temperature``: a document the model's search
already picks with probability, say, above 0.1 is more likely an unlabelled positive than a negative.

Beside the output, ``OUT`` + :data:`SIDECAR_SUFFIX` (``mined.tsv.mine.json``, checksummed JSON) records every
option the file was mined with (``temperature`` included, which the probability filter depends on), the
engine, the counts and the output's SHA-256.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from contrastlab import __version__
from contrastlab._checks import check_int
from contrastlab.config import ConfigError, check_fields, to_dict
from contrastlab.io import sha256_file, write_json_atomic
from contrastlab.scale.cluster import Engine

__all__ = ["MineConfig", "mine_pairs", "default_range_max", "SIDECAR_SUFFIX", "sidecar_path"]

SIDECAR_SUFFIX = ".mine.json"
"""Appended to the output's name for the record of how it was mined (``mined.tsv`` → ``mined.tsv.mine.json``)."""


def sidecar_path(out: str | Path) -> Path:
    """Where :func:`mine_pairs` records the options the file ``out`` was mined with."""
    out = Path(out)
    return out.with_name(out.name + SIDECAR_SUFFIX)


@dataclass(frozen=True)
class MineConfig:
    """What ``contrastlab mine`` reads and how it filters and picks the negatives."""

    model: str = "minilm"
    """minilm (the bundled all-MiniLM-L6-v2), a sentence-transformers/Hugging Face folder or cached name, a
    contrastlab text run, or a .npy of (2P, D) embeddings: the P anchors, then their P positives"""
    pairs: str | None = None
    """the pairs file (.tsv/.csv/.jsonl) or saved dataset folder; its distinct positives are the corpus"""
    query_prompt: str | None = None
    """put before each anchor before encoding (e.g. "query: "); null: the prompt the model records (a contrastlab
    run, its model folder, a sentence-transformers folder's "query" prompt), else none"""
    document_prompt: str | None = None
    """put before each document before encoding (e.g. "passage: "); null: the prompt the model records, else none"""
    header: bool = False
    """the first line of a .tsv/.csv pairs file names the columns"""
    split: str | None = None
    """the split of a saved DatasetDict"""
    num_negatives: int = 3
    """K, negatives per anchor"""
    range_min: int = 0
    """skip this many of the most similar surviving candidates"""
    range_max: int | None = None
    """candidates per anchor: its range_max + P nearest documents are searched, its P positives dropped, and at
    most range_max survivors of the filters kept, as sentence-transformers (null: range_min + K + P, or
    range_min + 10 K + P with a margin or max_score, P the most positives of one anchor)"""
    max_score: float | None = None
    """drop candidates more similar than this (cosine)"""
    min_score: float | None = None
    """drop candidates less similar than this (cosine)"""
    margin: float | None = None
    """drop candidate c unless s(a, c) + margin <= s(a, p) (sentence-transformers' absolute_margin), >= 0"""
    relative_margin: float | None = None
    """drop candidate c unless s(a, c) <= s(a, p) − |s(a, p)|·relative_margin, >= 0"""
    max_probability: float | None = None
    """drop candidate c if the model's softmax search over the whole corpus, at --temperature, picks it with
    probability P(c | a) above this, in (0, 1] (null: no such filter)"""
    temperature: float = 0.05
    """τ of that softmax search (the temperature the model was trained at)"""
    sampling: Literal["top", "random"] = "top"
    """top: the most similar survivors; random: K drawn among them"""
    seed: int = 0
    """seed of the random sampling"""
    output_format: Literal["n-tuple", "triplet"] = "n-tuple"
    """n-tuple: anchor, positive, negative_1..K (anchors with all K); triplet: one row per negative"""
    batch_size: int = 64
    """texts per encoder batch"""
    max_seq_length: int = 0
    """tokens per text (longer texts are truncated); 0: the model's own max_seq_length, as the audit (the teacher's
    own for the teacher)"""
    device: str = "cpu"
    """torch device of the encoder"""
    progress: bool = True
    """show progress bars while encoding"""
    teacher: str | None = None
    """a model (as `model`, not .npy) whose cosine scores of each written row's positive and negatives go to
    OUT.teacher.jsonl, the targets of the distillation losses (margin_mse, distill_kl); n-tuple output only"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.num_negatives < 1:
            raise ConfigError(f"num_negatives must be >= 1, got {self.num_negatives}")
        if self.range_min < 0:
            raise ConfigError(f"range_min must be >= 0, got {self.range_min}")
        range_max = default_range_max(self)
        if self.range_min >= range_max:
            raise ConfigError(
                f"range_min must be smaller than range_max, got range_min={self.range_min} >= {range_max}"
            )
        if self.num_negatives > range_max - self.range_min:
            raise ConfigError(
                f"num_negatives must be at most range_max − range_min = {range_max - self.range_min}, "
                f"got {self.num_negatives}"
            )
        for name in ("margin", "relative_margin"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(
                    f"{name} must be >= 0 (a negative margin keeps candidates above the positive), got {value}"
                )
        if self.max_score is not None and self.min_score is not None and self.min_score > self.max_score:
            raise ConfigError(f"min_score must be <= max_score = {self.max_score}, got {self.min_score}")
        if self.max_probability is not None and not 0 < self.max_probability <= 1:
            raise ConfigError(f"max_probability must be in (0, 1], got {self.max_probability}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if self.teacher is not None and (self.teacher.endswith(".npy") or self.output_format != "n-tuple"):
            raise ConfigError(
                f"teacher must be a model (not .npy) and output_format n-tuple, got {self.teacher!r} with "
                f"{self.output_format!r}"
            )
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_seq_length < 0:
            raise ConfigError(f"max_seq_length must be >= 0 (0: the model's own), got {self.max_seq_length}")


def default_range_max(config: MineConfig, max_positives: int = 1) -> int:
    """``range_max``, or sentence-transformers' default for it, given the most positives of one anchor."""
    if config.range_max is not None:
        return config.range_max
    filtered = config.margin is not None or config.relative_margin is not None or config.max_score is not None
    return config.range_min + config.num_negatives * (10 if filtered else 1) + max_positives


def _embeddings(config: MineConfig, anchors: list[str], documents: list[str], rows: Any) -> tuple[Any, Any]:
    """``(anchor embeddings (U, D), document embeddings (M, D))`` by the model (float32 tensors)."""
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.inputs import encode_texts, load_model

    if config.model.endswith(".npy"):
        from contrastlab.npyfile import NpyFormatError, load_npy

        path = Path(config.model)
        if not path.is_file():
            raise ValueError(f"model: {path} does not exist")
        try:
            arr = load_npy(path, mmap=True)
        except NpyFormatError as e:
            raise ValueError(f"model: {e}") from None
        p = len(rows.anchor_of)
        if arr.ndim != 2 or arr.dtype.kind != "f" or arr.shape[1] < 1:
            raise ValueError(
                f"model: {path} must be a 2-D float array of (2P, D) embeddings, got {arr.dtype} {arr.shape}"
            )
        if arr.shape[0] != 2 * p:
            raise ValueError(
                f"model: {path} has {arr.shape[0]} rows, but the pairs file has P = {p} pairs: the embeddings must "
                f"be (2P, D) = ({2 * p}, D), the anchors then the positives (their dimensions disagree)"
            )
        emb = torch.from_numpy(np.array(arr, dtype=np.float32))
        if not bool(torch.isfinite(emb).all()):
            raise ValueError(f"model: {path} contains NaN or Inf")
        return emb[rows.first_row_of_anchor], emb[p + rows.first_row_of_document]
    audit = AuditConfig(
        model=config.model, device=config.device, max_seq_length=config.max_seq_length, progress=config.progress
    )
    encoder = load_model(audit)
    bs, shown = config.batch_size, config.progress
    return (
        encode_texts(
            encoder, anchors, batch_size=bs, progress=shown, label="anchors", prompt=config.query_prompt or ""
        ),
        encode_texts(
            encoder, documents, batch_size=bs, progress=shown, label="documents", prompt=config.document_prompt or ""
        ),
    )


def _teacher_scores(config: MineConfig, rows: list[tuple[str, ...]]) -> np.ndarray:
    """The teacher's ``(R, 1 + K)`` cosine scores of the written rows (:func:`contrastlab.data.text.teacher_scores.score_rows`)."""
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.inputs import encode_texts, load_model
    from contrastlab.data.text.teacher_scores import score_rows

    audit = AuditConfig(
        model=str(config.teacher), device=config.device, max_seq_length=config.max_seq_length, progress=False
    )
    try:
        teacher = load_model(audit)
    except ValueError as e:
        raise ValueError(f"teacher: {str(e).removeprefix('model: ')}") from None

    def embed(texts: list[str]) -> Tensor:  # every distinct text in one call: batches sorted by length
        return encode_texts(teacher, texts, batch_size=config.batch_size, progress=config.progress, label="teacher")

    return score_rows(embed, rows, batch_size=sum(len(r) for r in rows))


@dataclass
class _Rows:
    """The pairs grouped as sentence-transformers groups them: distinct anchors, distinct documents."""

    anchors: list[str]
    documents: list[str]
    anchor_of: np.ndarray  # (P,) row → anchor
    document_of: np.ndarray  # (P,) row → document
    first_row_of_anchor: np.ndarray  # (U,)
    first_row_of_document: np.ndarray  # (M,)


def _group(anchor_texts: list[str], positive_texts: list[str]) -> _Rows:
    anchors: dict[str, int] = {}
    documents: dict[str, int] = {}
    anchor_of = np.array([anchors.setdefault(t, len(anchors)) for t in anchor_texts], dtype=np.int64)
    document_of = np.array([documents.setdefault(t, len(documents)) for t in positive_texts], dtype=np.int64)
    first_a = np.full(len(anchors), -1, dtype=np.int64)
    first_d = np.full(len(documents), -1, dtype=np.int64)
    for i in range(len(anchor_texts) - 1, -1, -1):
        first_a[anchor_of[i]] = i
        first_d[document_of[i]] = i
    return _Rows(list(anchors), list(documents), anchor_of, document_of, first_a, first_d)


def mine_pairs(
    config: MineConfig, out: str | Path, *, engine: Engine | None = None, shards: int | None = None
) -> dict[str, Any]:
    """Mine the negatives ``config`` describes and write them to ``out`` (.tsv, .csv or .jsonl).

    Everything is read and checked before the output is written (atomically); on any error nothing is.
    With ``engine`` Ray, the documents are searched as ``shards`` Ray actors (default: one per alive node),
    :func:`~contrastlab.scale.sharded_search.ray_sharded_search`, whose merged top lists and log-partitions
    are the one-process ones; the written file is the same.

    The options, the engine and the counts are recorded beside the output in :func:`sidecar_path` (written
    after it, atomically).

    Returns:
        A summary: ``anchors``, ``complete`` (anchors with all K negatives), ``rows`` written, ``out``,
        ``sidecar``.

    Raises:
        ValueError: naming the argument — a missing or bad pairs file or model, embeddings whose rows or
            dimension disagree with the pairs, an output suffix that is not a pairs format, a corpus too
            small for ``num_negatives`` + ``range_min``.
        RuntimeError: no anchor kept a negative (nothing to write).
    """
    from contrastlab.data.text.pairs import PAIR_FORMATS, TextPairs, read_text_pairs, write_text_pairs

    out = Path(out)
    if out.suffix.lower() not in PAIR_FORMATS:
        raise ValueError(f"out: {out} must end in {', '.join(PAIR_FORMATS)}")
    if config.pairs is None:
        raise ValueError("pairs: give the pairs file to mine (--pairs FILE)")
    try:
        pairs = read_text_pairs(config.pairs, header=config.header, split=config.split)
    except ValueError as e:
        raise ValueError(f"pairs: {str(e).removeprefix('path: ')}") from None
    rows = _group(pairs.anchors, pairs.positives)
    k = config.num_negatives
    if len(rows.documents) - 1 < k + config.range_min:
        raise ValueError(
            f"pairs: {len(rows.documents)} distinct positives form the corpus; num_negatives + range_min = "
            f"{k + config.range_min} needs more than that"
        )
    from contrastlab.audit.recorded_prompts import resolve_prompts

    query_prompt, document_prompt = resolve_prompts(config.model, config.query_prompt, config.document_prompt)
    config = replace(config, query_prompt=query_prompt, document_prompt=document_prompt)  # the sidecar records them
    anchor_emb, doc_emb = _embeddings(config, rows.anchors, rows.documents, rows)
    if anchor_emb.shape[1] != doc_emb.shape[1]:
        raise ValueError(f"model: anchors have dimension {anchor_emb.shape[1]}, documents {doc_emb.shape[1]}")
    with _corpus(doc_emb, engine or Engine(), shards, out.parent) as index:
        mined = _mine(config, index, rows, anchor_emb, doc_emb)
    out_rows: list[tuple[str, ...]] = []
    for i in range(len(pairs)):
        a = int(rows.anchor_of[i])
        negs = [rows.documents[j] for j in mined.ids[a].tolist() if j >= 0]
        if config.output_format == "n-tuple":
            if len(negs) == k:
                out_rows.append((pairs.anchors[i], pairs.positives[i], *negs))
        else:
            out_rows.extend((pairs.anchors[i], pairs.positives[i], n) for n in negs)
    if not out_rows:
        raise RuntimeError(
            "no anchor kept a negative through the filters; loosen margin/relative_margin/max_score/min_score/"
            "max_probability or raise range_max"
        )
    scores = _teacher_scores(config, out_rows) if config.teacher is not None else None  # before anything is written
    columns = ("anchor", "positive", "negative") if config.output_format == "triplet" else ()
    write_text_pairs(TextPairs(tuple(out_rows), columns, out.name), out)
    if scores is not None:
        from contrastlab.data.text.teacher_scores import scores_path, write_teacher_scores

        write_teacher_scores(scores_path(out), out_rows, scores, str(config.teacher))
    summary: dict[str, Any] = {
        "anchors": len(rows.anchors),
        "complete": int(mined.complete.sum()),
        "rows": len(out_rows),
    }
    write_json_atomic(
        sidecar_path(out),
        {
            "command": "contrastlab mine",
            "version": __version__,
            "out": out.name,
            "sha256": sha256_file(out),
            "config": to_dict(config),
            "engine": {"name": (engine or Engine()).name, "address": (engine or Engine()).address, "shards": shards},
            **summary,
        },
    )
    return {**summary, "out": str(out), "sidecar": str(sidecar_path(out))}


@contextlib.contextmanager
def _corpus(doc_emb: Tensor, engine: Engine, shards: int | None, temp_dir: Path) -> Iterator[Any]:
    """The documents as an exact cosine index: one flat index here, or ``shards`` Ray actors."""
    from contrastlab.search import EmbeddingIndex

    if shards is not None:
        check_int("shards", shards, 1)
    if not engine.is_ray:
        if shards is not None:
            raise ValueError("--shards: shards need --engine ray")
        index = EmbeddingIndex(doc_emb.shape[1], metric="cosine", kind="flat")
        index.add(doc_emb)
        yield index
        return
    from contrastlab.scale.cluster import ray_session
    from contrastlab.scale.sharded_search import ray_rows_search

    with ray_session(engine.address, temp_dir=temp_dir) as ray:
        corpus = ray_rows_search(doc_emb.detach().cpu().numpy(), shards=shards, metric="cosine", ray=ray)
        try:
            yield corpus
        finally:
            corpus.close()


def _mine(config: MineConfig, index: Any, rows: _Rows, anchor_emb: Tensor, doc_emb: Tensor) -> Any:
    """The miner over ``index`` with ``config``'s filters; each anchor's positives excluded."""
    from contrastlab.search.mining import mine_hard_negatives

    k = config.num_negatives
    # per anchor: its positives (all excluded), the lowest-scoring one for the margins
    positives_of: list[list[int]] = [[] for _ in rows.anchors]
    for a, d in zip(rows.anchor_of.tolist(), rows.document_of.tolist(), strict=True):
        if d not in positives_of[a]:
            positives_of[a].append(d)
    width = max(len(p) for p in positives_of)
    exclude = np.full((len(rows.anchors), width), -1, dtype=np.int64)
    a_unit = torch.nn.functional.normalize(anchor_emb, dim=1)
    d_unit = torch.nn.functional.normalize(doc_emb, dim=1)
    margin_doc = np.empty(len(rows.anchors), dtype=np.int64)
    for a, ps in enumerate(positives_of):
        exclude[a, : len(ps)] = ps
        sims = (d_unit[ps] @ a_unit[a]).numpy()
        margin_doc[a] = ps[int(np.argmin(sims))]
    range_max = min(default_range_max(config, width), index.ntotal - 1)
    return mine_hard_negatives(
        index, anchor_emb, doc_emb[torch.from_numpy(margin_doc)], num_negatives=k,
        candidates=range_max, exclude_ids=exclude, margin=config.margin,
        relative_margin=config.relative_margin, max_score=config.max_score, min_score=config.min_score,
        range_min=config.range_min, sampling=config.sampling, seed=config.seed,
        max_probability=config.max_probability, temperature=config.temperature,
    )  # fmt: skip
