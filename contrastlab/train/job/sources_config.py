"""Several text datasets in one run: :class:`SourceConfig` (one pairs file or BEIR task) and :class:`SourcesConfig`.

``data.name: sources`` trains on the list ``data.sources.datasets``
(:mod:`contrastlab.train.job.text_sources`). Each batch comes from one source (``batches: per_source``: no
negatives across datasets), chosen by ``sampling`` (``round_robin``: each in turn; ``proportional``: in
proportion to ``weight``, by default the source's number of training pairs), or mixes them (``batches: mixed``:
one sampler over the union).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contrastlab.config import ConfigError, check_fields

__all__ = ["SourceConfig", "SourcesConfig"]


@dataclass(frozen=True)
class SourceConfig:
    """One dataset of text pairs."""

    path: str = ""
    """a pairs file (.tsv/.csv/.jsonl, or a saved datasets folder) or, for kind task, a BEIR folder
    (corpus.jsonl, queries.jsonl, qrels/<split>.tsv); a relative path is under data.root when that is set"""
    kind: Literal["pairs", "task"] = "pairs"
    """pairs: rows (anchor, positive[, negatives…]); task: one pair (query text, document text) per qrel of
    grade > 0, read with contrastlab.tasks.read_beir_task (a query's other relevant documents are never its
    negatives)"""
    split: str | None = None
    """pairs: the split of a saved DatasetDict; task: the qrels split (null: train)"""
    part: Literal["train", "dev", "all"] = "all"
    """task: the queries of contrastlab.tasks.holdout's train part, its dev part, or all of the split"""
    dev_fraction: float = 0.2
    """task: the share of queries holdout puts in the dev part"""
    seed: int = 0
    """task: the seed of holdout"""
    header: bool = False
    """pairs (.tsv/.csv): the first line names the columns"""
    weight: float | None = None
    """proportional sampling: the source's share of the batches, relative to the others' (null: its number of
    training pairs)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.path.strip():
            raise ConfigError("path must name a pairs file or a BEIR folder, got an empty path")
        if not 0 < self.dev_fraction < 1:
            raise ConfigError(f"dev_fraction must be in (0, 1), got {self.dev_fraction}")
        if self.weight is not None and self.weight <= 0:
            raise ConfigError(f"weight must be > 0 or null, got {self.weight}")
        if self.kind == "pairs" and self.part != "all":
            raise ConfigError(f"part applies to kind task (holdout's parts), got part={self.part!r} with kind 'pairs'")


@dataclass(frozen=True)
class SourcesConfig:
    """The datasets of ``data.name: sources`` and how batches are drawn from them."""

    datasets: tuple[SourceConfig, ...] = ()
    """the sources, at least one"""
    sampling: Literal["round_robin", "proportional"] = "proportional"
    """per_source batches: round_robin (source 0, 1, …, 0, 1, …) or proportional (each source's share of the
    steps follows its weight, interleaved as evenly as possible)"""
    batches: Literal["per_source", "mixed"] = "per_source"
    """per_source: every batch comes from one source (no negatives across datasets); mixed: batches are drawn
    from the union of the sources (negatives across datasets; sampling must be proportional, by size)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.batches == "mixed" and self.sampling != "proportional":
            raise ConfigError("sampling must be 'proportional' for batches 'mixed' (one sampler over the union)")
        if self.batches == "mixed" and any(s.weight is not None for s in self.datasets):
            raise ConfigError("datasets[].weight applies to batches 'per_source'; mixed batches follow the sizes")
