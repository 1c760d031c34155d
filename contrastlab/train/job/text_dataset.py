"""Text pairs as a training dataset: the ``text`` entry of ``contrastlab train``'s dataset registry.

``data.name: text`` reads (anchor, positive[, negative_1 …]) rows from

* ``data.text.path`` — a ``.tsv``, ``.csv`` or ``.jsonl`` file or a folder written by
  ``datasets.Dataset.save_to_disk`` (:func:`contrastlab.data.text.pairs.read_text_pairs`); the last
  ``eval.n`` rows are held out (at most all but ``data.batch_size``);
* or, when ``path`` is unset, the docstring code corpus built at run time from the installed Python
  (:mod:`contrastlab.data.text.code_corpus`, sources ``data.text.sources``): training on its ``train`` split,
  evaluating on ``eval.n`` pairs of its ``test`` split drawn with ``eval.seed``. Its provenance (versions,
  counts, SHA-256) is returned with the source and recorded in ``results.json``.

Batches are drawn by a :class:`~contrastlab.data.text.conflict_free.ConflictFreeSampler` seeded by
``train.seed`` (``data.text.false_negatives: sampler``, the default: no two rows of a batch share a text —
the same token ids — or pair one's anchor with another positive of it), or an
:class:`~contrastlab.data.sampler.EpochSampler` (``mask``: the batch then carries ``"false_negative"``, the
``(N, N)`` :func:`~contrastlab.data.text.conflict_free.false_negative_mask` the job turns into the loss's
``weights``: per anchor, the other rows whose positive is the anchor's text, its positive's text or
another document relevant to it; ``off``); both are pure functions of the step, so resume is exact. Batches carry the texts as ``(N, L)`` code-point rows
(:mod:`contrastlab.data.text.codes`), which a text encoder of :data:`contrastlab.models.text.TEXT_ENCODERS`
tokenises; ``prompts.query`` is put before each anchor and ``prompts.document`` before every other text.
``"labels"`` is each pair's row number, so a loss over classes (``supcon``) treats a pair's
two texts as the positives of one another. A file's negative columns become ``"negatives"``, ``(N, K, L)``
per-anchor hard negatives, which the job embeds with the anchors and positives; they need a loss that
takes them as per-anchor negatives (``info_nce``, ``dcl``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from contrastlab.config import ConfigError
from contrastlab.data.sampler import EpochSampler
from contrastlab.data.text.codes import texts_to_codes
from contrastlab.data.text.conflict_free import ConflictFreeSampler, false_negative_mask
from contrastlab.data.text.keys import row_keys as keys_of_rows
from contrastlab.data.text.keys import text_keys
from contrastlab.train.job.config import (
    EncoderConfig,
    JobConfig,
    loss_registry,
    loss_signature,
    needs_negatives,
    takes_teacher_scores,
)
from contrastlab.train.job.data_source import DataSource

if TYPE_CHECKING:
    from contrastlab.data.text.code_corpus import CodeCorpus
    from contrastlab.data.text.pairs import TextPairs
    from contrastlab.train.job.prompts import PromptsConfig

__all__ = ["build_texts", "text_batch", "row_keys", "tokenizer_folder", "train_sampler", "NEGATIVE_LOSSES"]

NEGATIVE_LOSSES = ("info_nce", "dcl", "support_corrected")
"""Losses that take a file's negative columns as per-anchor hard negatives ``(N, K, D)`` (support-corrected
InfoNCE: the mined neighbours of each anchor stand for the support its negatives are drawn from)."""


@functools.lru_cache(maxsize=2)
def _code_corpus(sources: tuple[str, ...]) -> CodeCorpus:
    """The corpus of ``sources`` (a few seconds to parse the standard library; kept for the process)."""
    from contrastlab.data.text.code_corpus import CodeCorpusConfig, build_code_corpus

    return build_code_corpus(CodeCorpusConfig(sources=sources))


def _held_out(config: JobConfig) -> tuple[TextPairs, TextPairs, dict[str, Any]]:
    """(training rows, held-out rows, provenance)."""
    from contrastlab.data.text.pairs import TextPairs, read_text_pairs

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


def text_batch(
    pairs: TextPairs, idx: list[int], offset: int, negatives: int, prompts: PromptsConfig
) -> dict[str, Tensor]:
    """The batch of rows ``idx`` of ``pairs``, the texts as code-point rows with their prompts.

    ``"labels"`` is ``offset`` + the row number; the first ``negatives`` negative columns become ``(n, K, L)``.
    """
    # one tensor for all the batch's texts: anchors, positives and negatives share the padded width L,
    # so the job can stack them into the one (R, L) input the encoder embeds
    n = len(idx)
    q, d = prompts.query, prompts.document  # the run's prompts, before each column's texts
    texts = [q + pairs.rows[i][0] for i in idx] + [d + pairs.rows[i][1] for i in idx]
    texts += [d + pairs.rows[i][2 + j] for i in idx for j in range(negatives)]
    codes = texts_to_codes(texts)  # (n·(2 + K), L)
    batch = {
        "anchor": codes[:n],
        "positive": codes[n : 2 * n],
        "labels": torch.tensor([offset + i for i in idx], dtype=torch.int64),
    }
    if negatives:
        batch["negatives"] = codes[2 * n :].view(n, negatives, codes.shape[1])  # (n, K, L)
    return batch


def tokenizer_folder(encoder: EncoderConfig) -> str:
    """The folder the encoder's tokenizer loads from (the bundled MiniLM's, or ``encoder.path``).

    Raises:
        contrastlab.train.ConfigError: the encoder is not a text encoder, or its weights are not installed.
    """
    from contrastlab.models.text import TEXT_ENCODERS, bundled_minilm_path

    if encoder.name not in TEXT_ENCODERS:
        raise ConfigError(f"encoder.name {encoder.name!r} is not a text encoder; {', '.join(sorted(TEXT_ENCODERS))}")
    if encoder.path is not None:
        return encoder.path
    try:
        return bundled_minilm_path()
    except ValueError as e:
        raise ConfigError(f"encoder.{e}") from None


def row_keys(config: JobConfig, pairs: TextPairs) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(own, protected) keys of each row (:func:`contrastlab.data.text.keys.row_keys`), by the encoder's token ids.

    Raises:
        contrastlab.train.ConfigError: the encoder is no text encoder, or no tokenizer loads from its folder.
    """
    folder = tokenizer_folder(config.encoder)
    try:
        return keys_of_rows(pairs.rows, functools.partial(text_keys, folder, config.encoder.max_seq_length))
    except ValueError as e:  # no tokenizer loads from the folder
        raise ConfigError(f"encoder.path: {e}") from None


def train_sampler(
    config: JobConfig, train: TextPairs, seed: int
) -> tuple[Callable[[int], Tensor], list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The batch sampler of ``data.text.false_negatives`` over ``train`` and the rows' keys (empty when ``off``).

    Raises:
        contrastlab.train.ConfigError: ``mask`` with a loss that cannot leave columns out, or no conflict-free
            batch of ``data.batch_size`` rows.
    """
    mode, batch_size = config.data.text.false_negatives, config.data.batch_size
    if mode == "off":
        return EpochSampler(len(train), batch_size, seed=seed), [], []
    if mode == "mask":
        params = loss_signature(loss_registry()[config.loss.name])
        if "weights" not in params or config.loss.symmetric or train.num_negatives:
            raise ConfigError(
                f"data.text.false_negatives 'mask' needs a loss with per-candidate weights (info_nce, dcl), "
                f"symmetric false and no negative columns; got loss {config.loss.name!r}, symmetric="
                f"{config.loss.symmetric}, {train.num_negatives} negative column(s) (use 'sampler')"
            )
    own, protected = row_keys(config, train)
    if mode == "mask":
        return EpochSampler(len(train), batch_size, seed=seed), own, protected
    try:
        sampler = ConflictFreeSampler(own, batch_size, protected=protected, seed=seed, drop_last=True)
    except ValueError as e:
        raise ConfigError(f"data.{e} (data.text.false_negatives 'sampler')") from None
    return sampler, own, protected


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
    scores, scores_provenance = _teacher_scores(config, train, held)
    if scores_provenance is not None:
        provenance = {**provenance, "teacher_scores": scores_provenance}
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
    fn = loss_registry()[config.loss.name]
    if not k and needs_negatives(fn) and not takes_teacher_scores(fn):
        raise ConfigError(
            f"loss.name {config.loss.name!r} needs negatives: data.text.path has no negative columns "
            "(contrastlab mine writes a pairs file with them)"
        )
    if (
        k
        and config.data.text.negative_columns == "batch"
        and "weights" not in loss_signature(loss_registry()[config.loss.name])
    ):
        raise ConfigError(
            f"data.text.negative_columns 'batch' needs a loss with per-candidate weights (info_nce, dcl), "
            f"got loss {config.loss.name!r}"
        )
    sampler, own, protected = train_sampler(config, train, config.train.seed)
    mask_batches = config.data.text.false_negatives == "mask"

    def rows_of(pairs: TextPairs, idx: list[int], offset: int, negatives: int) -> dict[str, Tensor]:
        batch = text_batch(pairs, idx, offset, negatives, config.prompts)
        if negatives and scores is not None and pairs is train:
            batch["teacher_scores"] = scores[idx]  # (n, 1 + K): the teacher's scores of these rows
        return batch

    def batch_at(step: int) -> dict[str, Tensor]:
        idx = sampler(step).tolist()
        batch = rows_of(train, idx, 0, k)
        if mask_batches:
            batch["false_negative"] = false_negative_mask(
                [own[i][0] for i in idx], [own[i][1] for i in idx], [protected[i] for i in idx]
            )
        return batch

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


def _teacher_scores(
    config: JobConfig, train: TextPairs, held: TextPairs
) -> tuple[Tensor, dict[str, str]] | tuple[None, None]:
    """The training rows' teacher scores ``(R, 1 + K)`` from ``data.text.teacher_scores``, and the file's provenance.

    The scores are checked against the pairs file; the provenance is its path, teacher and SHA-256.
    ``(None, None)`` without the field.

    Raises:
        contrastlab.train.ConfigError: naming ``data.text.teacher_scores`` (scores of another pairs file, a
            count or id that does not match, a file without negative columns).
    """
    path = config.data.text.teacher_scores
    if path is None:
        return None, None
    from contrastlab.data.text.teacher_scores import read_teacher_scores_file

    try:
        scores, provenance = read_teacher_scores_file(path, [*train.rows, *held.rows])
    except ValueError as e:
        raise ConfigError(f"data.text.teacher_scores: {e}") from None
    return torch.from_numpy(scores[: len(train)]), provenance
