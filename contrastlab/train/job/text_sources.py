"""Several text datasets as one training source: the ``sources`` entry of ``contrastlab train``'s dataset registry.

``data.name: sources`` reads every dataset of ``data.sources.datasets``
(:class:`~contrastlab.train.job.sources_config.SourceConfig`):

* ``kind: pairs`` — a pairs file, as ``data.text.path`` (:func:`contrastlab.data.text.pairs.read_text_pairs`);
* ``kind: task`` — a BEIR folder read with :func:`contrastlab.tasks.read_beir_task` (``split``), optionally
  the train or dev part of :func:`contrastlab.tasks.holdout`; one pair (query text, document text) per
  qrel of grade > 0, so a query with several relevant documents gives several rows with one anchor, whose
  other positives are protected from being its negatives.

The last ``ceil(eval.n / S)`` rows of each of the S sources are held out (the evaluation batch). Batches are
drawn as ``data.text.false_negatives`` says (by default no false negative in a batch,
:class:`~contrastlab.data.text.conflict_free.ConflictFreeSampler`), each source with its own sampler seeded by
``(train.seed, source)``; with ``batches: per_source`` step ``s`` goes to the source
:class:`~contrastlab.data.text.source_schedule.SourceSchedule` names, with ``batches: mixed`` one sampler draws
from the union. Everything is a pure function of the step, so resume is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import Tensor

from contrastlab.config import ConfigError
from contrastlab.data.text.conflict_free import false_negative_mask
from contrastlab.data.text.pairs import TextPairs
from contrastlab.data.text.source_schedule import SourceSchedule
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.data_source import DataSource
from contrastlab.train.job.sources_config import SourceConfig
from contrastlab.train.job.text_dataset import NEGATIVE_LOSSES, text_batch, train_sampler

__all__ = ["build_sources", "read_source", "under_root"]

_SOURCE_SEED_STRIDE = 7919  # a prime: source i's sampler is seeded by train.seed * stride + i


def under_root(path: str, root: str | None) -> str:
    """``path``, or ``root/path`` when ``path`` is relative and ``root`` (``data.root``) is set."""
    return path if root is None or Path(path).is_absolute() else str(Path(root) / path)


def read_source(src: SourceConfig, where: str, root: str | None = None) -> TextPairs:
    """The rows of one source (a relative ``path`` is under ``root``, the job's ``data.root``, when set).

    Raises:
        contrastlab.train.ConfigError: naming ``where`` (e.g. ``data.sources.datasets[1]``) for a source that
            does not read or holds no pair.
    """
    path = under_root(src.path, root)
    if src.kind == "pairs":
        from contrastlab.data.text.pairs import read_text_pairs

        try:
            return read_text_pairs(path, header=src.header, split=src.split)
        except ValueError as e:
            raise ConfigError(f"{where}.path: {str(e).removeprefix('path: ')}") from None
    from contrastlab.tasks import holdout, read_beir_task

    try:
        task = read_beir_task(path, split=src.split or "train")
    except ValueError as e:
        raise ConfigError(f"{where}.path: {str(e).removeprefix('path: ')}") from None
    if src.part != "all":
        train, dev = holdout(task, dev_fraction=src.dev_fraction, seed=src.seed)
        task = train if src.part == "train" else dev
    text_of = dict(zip(task.doc_ids, task.doc_texts, strict=True))
    rows = tuple(
        (q_text, text_of[d])
        for qid, q_text in zip(task.query_ids, task.query_texts, strict=True)
        for d in sorted(task.relevant(qid))
        if d in text_of
    )
    if not rows:
        raise ConfigError(
            f"{where}: {src.path} ({src.kind}, split {src.split or 'train'}, part {src.part}) holds no pair"
        )
    return TextPairs(rows, ("anchor", "positive"), f"{task.name}/{task.split}/{src.part}")


def build_sources(config: JobConfig) -> DataSource:
    """The ``sources`` data source (see the module docstring).

    Raises:
        contrastlab.train.ConfigError: naming the field: an empty list, a source that does not read or is
            empty, too few rows for ``data.batch_size``, negative columns with a loss that takes none, mixed
            batches over sources of different widths.
    """
    cfg = config.data.sources
    if not cfg.datasets:
        raise ConfigError("data.sources.datasets must list at least one source for data.name 'sources'")
    n_eval, batch_size = config.eval.n, config.data.batch_size
    per_source_held = math.ceil(n_eval / len(cfg.datasets))
    trains: list[TextPairs] = []
    held_rows: list[tuple[str, ...]] = []
    read: list[dict[str, Any]] = []
    for i, src in enumerate(cfg.datasets):
        where = f"data.sources.datasets[{i}]"
        pairs = read_source(src, where, config.data.root)
        cut = len(pairs) - per_source_held
        if cut < batch_size:
            raise ConfigError(
                f"{where}: {src.path} holds {len(pairs)} pairs; need data.batch_size = {batch_size} to train on "
                f"plus {per_source_held} held out (eval.n / number of sources)"
            )
        if pairs.num_negatives and config.loss.name not in NEGATIVE_LOSSES:
            raise ConfigError(
                f"loss.name {config.loss.name!r} takes no negatives from {where} ({pairs.num_negatives} negative "
                f"column(s)); use {' or '.join(NEGATIVE_LOSSES)}"
            )
        trains.append(TextPairs(pairs.rows[:cut], pairs.columns, pairs.name))
        read.append({"path": src.path, "kind": src.kind, "name": pairs.name, "pairs": len(pairs), "train": cut})
        held_rows += [r[:2] for r in pairs.rows[cut:]]
    if cfg.batches == "mixed":
        widths = {len(t.columns) for t in trains}
        if len(widths) > 1:
            raise ConfigError(f"data.sources.batches 'mixed' needs sources of one width, got widths {sorted(widths)}")
        trains = [TextPairs(tuple(r for t in trains for r in t.rows), trains[0].columns, "mixed")]
    mask = config.data.text.false_negatives == "mask"
    samplers: list[tuple[Callable[[int], Tensor], list[Any], list[Any]]] = [
        train_sampler(config, t, config.train.seed * _SOURCE_SEED_STRIDE + i) for i, t in enumerate(trains)
    ]
    offsets = [sum(len(t) for t in trains[:i]) for i in range(len(trains))]
    if cfg.batches == "per_source":
        weights = [
            float(s.weight) if s.weight is not None else float(r["train"])
            for s, r in zip(cfg.datasets, read, strict=True)
        ]
    else:
        weights = [1.0]  # one source: the union
    schedule = SourceSchedule(weights, cfg.sampling)

    def batch_at(step: int) -> dict[str, Tensor]:
        i, local = schedule.at(step)
        sampler, own, protected = samplers[i]
        idx = sampler(local).tolist()
        batch = text_batch(trains[i], idx, offsets[i], trains[i].num_negatives, config.prompts)
        if mask:
            batch["false_negative"] = false_negative_mask(
                [own[j][0] for j in idx], [own[j][1] for j in idx], [protected[j] for j in idx]
            )
        return batch

    held = TextPairs(tuple(held_rows), ("anchor", "positive"), "held out")
    total = offsets[-1] + len(trains[-1])
    provenance = {"kind": "sources", "batches": cfg.batches, "sampling": cfg.sampling, "sources": read}
    return DataSource(
        kind="texts",
        input_shape=(0,),
        batch_at=batch_at,
        eval_batch=text_batch(held, list(range(len(held))), total, 0, config.prompts),
        num_classes=total + len(held),
        provenance=provenance,
        train_size=total,
    )
