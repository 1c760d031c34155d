"""Scores a model's authors or a leaderboard published on a task, for an audit to set its own beside.

MTEB (Muennighoff et al. 2022, arXiv:2210.07316) keeps every model's scores on every task in its results
repository. An entry here names the model as audits name it, the task by the content of its split
(:meth:`~contrastlab.tasks.beir.RetrievalTask.fingerprint` of the whole split: documents, queries and
judgements), and the scores by MTEB's names. A score here is one an audit of this repository has reproduced
to the digits published (``benchmarks/mteb_scifact.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PublishedScores", "PUBLISHED", "published_scores"]


@dataclass(frozen=True)
class PublishedScores:
    """One model's published scores on one task split."""

    model: str
    """the model as it was published"""
    aliases: tuple[str, ...]
    """the names an audit's ``model`` field gives it (the bundled model's ``minilm`` among them)"""
    task: str
    """the task as it was published"""
    split: str
    """the split the scores are of"""
    fingerprint: str
    """the whole split's content fingerprint (:meth:`RetrievalTask.fingerprint`)"""
    scores: Mapping[str, float]
    """MTEB's score name (``ndcg_at_10``, …) → the published value"""
    source: str
    """where the scores were published"""
    max_seq_length: int
    """tokens per text the published run used (the model's own)"""


PUBLISHED: tuple[PublishedScores, ...] = (
    PublishedScores(
        model="sentence-transformers/all-MiniLM-L6-v2",
        aliases=("minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
        task="SciFact",
        split="train",
        fingerprint="4bdfa0c099c9e0ab234ddb51d3a2a12ae23ef247c3f67f39e071d82e9cab96c2",
        scores={"ndcg_at_10": 0.66020, "map_at_100": 0.62027, "recall_at_100": 0.93243},
        source="MTEB's results repository (all-MiniLM-L6-v2 revision 8b3219a9, mteb 1.12.75)",
        max_seq_length=256,
    ),
)
"""Every published entry known: each reproduced by an audit (``benchmarks/mteb_scifact.py``)."""


def published_scores(model: str, fingerprint: str, split: str) -> PublishedScores | None:
    """The entry for ``model`` (an audit's ``model`` field) on the split whose whole content has ``fingerprint``.

    Examples:
        >>> published_scores("minilm", PUBLISHED[0].fingerprint, "train").scores["ndcg_at_10"]
        0.6602
        >>> published_scores("minilm", "0" * 64, "train") is None
        True
    """
    for entry in PUBLISHED:
        if model in entry.aliases and fingerprint == entry.fingerprint and split == entry.split:
            return entry
    return None
