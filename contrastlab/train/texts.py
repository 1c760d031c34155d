"""Text pairs as a training dataset: the ``text`` entry of ``contrastlab train``'s dataset registry.

``data.name: text`` reads (anchor, positive[, negative_1 …]) rows from

* ``data.text.path`` — a ``.tsv``, ``.csv`` or ``.jsonl`` file or a folder written by
  ``datasets.Dataset.save_to_disk`` (:func:`contrastlab.data.text_pairs.read_text_pairs`); the last
  ``eval.n`` rows are held out (at most all but ``data.batch_size``);
* or, when ``path`` is unset, the docstring code corpus built at run time from the installed Python
  (:mod:`contrastlab.data.code_corpus`, sources ``data.text.sources``): training on its ``train`` split,
  evaluating on ``eval.n`` pairs of its ``test`` split drawn with ``eval.seed``. Its provenance (versions,
  counts, SHA-256) is returned with the source and recorded in ``results.json``.

Batches are drawn by an :class:`~contrastlab.data.sampler.EpochSampler` seeded by ``train.seed`` (a pure
function of the step, so resume is exact) and carry the texts as ``(N, L)`` code-point rows
(:mod:`contrastlab.data.text_codes`), which a text encoder of :data:`contrastlab.models.text.TEXT_ENCODERS`
tokenises. ``"labels"`` is each pair's row number, so a loss over classes (``supcon``) treats a pair's
two texts as the positives of one another. A file's negative columns become ``"negatives"``, ``(N, K, L)``
per-anchor hard negatives, which the job embeds with the anchors and positives; they need a loss that
takes them as per-anchor negatives (``info_nce``, ``dcl``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from contrastlab.data.sampler import EpochSampler
from contrastlab.data.text_codes import texts_to_codes
from contrastlab.train.data_source import DataSource
from contrastlab.train.dataconf import ConfigError
from contrastlab.train.job_config import JobConfig

if TYPE_CHECKING:
    from contrastlab.data.code_corpus import CodeCorpus
    from contrastlab.data.text_pairs import TextPairs

__all__ = ["build_texts", "NEGATIVE_LOSSES"]

NEGATIVE_LOSSES = ("info_nce", "dcl")
"""Losses that take a file's negative columns as per-anchor hard negatives ``(N, K, D)``."""


@functools.lru_cache(maxsize=2)
def _code_corpus(sources: tuple[str, ...]) -> CodeCorpus:
    """The corpus of ``sources`` (a few seconds to parse the standard library; kept for the process)."""
    from contrastlab.data.code_corpus import CodeCorpusConfig, build_code_corpus

    return build_code_corpus(CodeCorpusConfig(sources=sources))


def _held_out(config: JobConfig) -> tuple[TextPairs, TextPairs, dict[str, Any]]:
    """(training rows, held-out rows, provenance)."""
    from contrastlab.data.text_pairs import TextPairs, read_text_pairs

    text, n_eval, batch = config.data.text, config.eval.n, config.data.batch_size
    if text.path is None:
        try:
            corpus = _code_corpus(text.sources)
        except ValueError as e:
            raise ConfigError(f"data.text.{e}") from None
        train, test = corpus.text_pairs("train"), corpus.text_pairs("test")
        g = torch.Generator().manual_seed(config.eval.seed)
        pick = torch.randperm(len(test), generator=g)[:n_eval].sort().values.tolist()
        held = TextPairs(tuple(test.rows[i] for i in pick), test.columns, test.name)
        return train, held, {"kind": "code corpus", **corpus.provenance}
    try:
        pairs = read_text_pairs(text.path, header=text.header, split=text.split)
    except ValueError as e:
        raise ConfigError(f"data.text.{e}") from None
    if len(pairs) < batch + 2:
        raise ConfigError(
            f"data.text.path: {text.path} holds {len(pairs)} rows; need data.batch_size = {batch} to train on "
            "plus at least 2 held out"
        )
    cut = max(len(pairs) - n_eval, batch)
    train = TextPairs(pairs.rows[:cut], pairs.columns, pairs.name)
    held = TextPairs(pairs.rows[cut:], pairs.columns, pairs.name)
    provenance = {"kind": "pairs file", "path": text.path, "rows": len(pairs), "columns": list(pairs.columns)}
    if Path(text.path).is_file():  # the content hash a model card names (a saved dataset folder has none)
        from contrastlab.io import sha256_file

        provenance["sha256"] = sha256_file(text.path)
    return train, held, provenance


def build_texts(config: JobConfig) -> DataSource:
    """The ``text`` data source (see the module docstring).

    Raises:
        contrastlab.train.ConfigError: naming ``data.text.path`` (a missing or malformed pairs file, with its
            line) or ``data.batch_size`` (more than the training rows), or ``loss.name`` (negative columns
            and a loss other than :data:`NEGATIVE_LOSSES`).
    """
    train, held, provenance = _held_out(config)
    batch_size = config.data.batch_size
    if batch_size > len(train):
        raise ConfigError(f"data.batch_size ({batch_size}) exceeds the {len(train)} training pairs of {train.name}")
    k = train.num_negatives
    scores = _teacher_scores(config, train, held)
    from contrastlab.train.job_config import loss_registry, takes_teacher_scores

    if k and scores is None and takes_teacher_scores(loss_registry()[config.loss.name]):
        raise ConfigError(
            f"loss.name {config.loss.name!r} distils a teacher's scores of the {k} negative column(s); set "
            "data.text.teacher_scores (the file contrastlab mine --teacher writes)"
        )
    if k and config.loss.name not in NEGATIVE_LOSSES and scores is None:
        raise ConfigError(
            f"loss.name {config.loss.name!r} takes no negatives from data.text.path ({k} negative column(s)); "
            f"use {' or '.join(NEGATIVE_LOSSES)}, or drop the columns"
        )
    sampler = EpochSampler(len(train), batch_size, seed=config.train.seed)

    def rows_of(pairs: TextPairs, idx: list[int], offset: int, negatives: int) -> dict[str, Tensor]:
        # one tensor for all the batch's texts: anchors, positives and negatives share the padded width L,
        # so the job can stack them into the one (R, L) input the encoder embeds
        n = len(idx)
        texts = [pairs.rows[i][j] for j in range(2) for i in idx]
        texts += [pairs.rows[i][2 + j] for i in idx for j in range(negatives)]
        codes = texts_to_codes(texts)  # (n·(2 + K), L)
        batch = {
            "anchor": codes[:n],
            "positive": codes[n : 2 * n],
            "labels": torch.tensor([offset + i for i in idx], dtype=torch.int64),
        }
        if negatives:
            batch["negatives"] = codes[2 * n :].view(n, negatives, codes.shape[1])  # (n, K, L)
            if scores is not None and pairs is train:
                batch["teacher_scores"] = scores[idx]  # (n, 1 + K)
        return batch

    def batch_at(step: int) -> dict[str, Tensor]:
        return rows_of(train, sampler(step).tolist(), 0, k)

    return DataSource(
        kind="texts",
        input_shape=(0,),
        batch_at=batch_at,
        eval_batch=rows_of(held, list(range(len(held))), len(train), 0),
        num_classes=len(train) + len(held),
        provenance=provenance,
        train_size=len(train),
        teacher_scores=scores is not None,
    )


def _teacher_scores(config: JobConfig, train: TextPairs, held: TextPairs) -> Tensor | None:
    """The training rows' teacher scores ``(R, 1 + K)`` from ``data.text.teacher_scores``, checked against the file.

    Raises:
        contrastlab.train.ConfigError: naming ``data.text.teacher_scores`` (scores of another pairs file, a
            count or id that does not match, a file without negative columns).
    """
    path = config.data.text.teacher_scores
    if path is None:
        return None
    from contrastlab.train.teacher_scores import read_teacher_scores

    try:
        scores = read_teacher_scores(path, [*train.rows, *held.rows])
    except ValueError as e:
        raise ConfigError(f"data.text.teacher_scores: {e}") from None
    return torch.from_numpy(scores[: len(train)])
