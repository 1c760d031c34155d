"""Hard negatives mined from an :class:`~contrastlab.search.EmbeddingIndex`, false negatives filtered.

For each anchor a_i with positive p_i the index returns its ``candidates`` nearest corpus items; the
anchor's own positive (``exclude_ids``) is removed and two filters drop likely false negatives —
items that are as similar to the anchor as its positive is, i.e. that would be positives too:

* **margin** (``margin``): keep item c only if ``s(a_i, c) ≤ s(a_i, p_i) − margin`` (the absolute
  margin of sentence-transformers' ``mine_hard_negatives``; NV-Retriever, Moreira et al. 2024,
  arXiv 2407.15831, §3.2, names it "TopK-Abs");
* **softmax-search probability** (``max_probability``): keep c only if the model's softmax search
  (Whiteley 2026, eq. 6) picks it with probability ``P(c | a_i) = exp(s(a_i, c)/τ) / Z(a_i) ≤
  max_probability``, where ``log Z(a_i)`` is the exact log-partition over the **whole** corpus
  (:func:`~contrastlab.search.log_partition`, streamed in blocks). A candidate the learned search
  already picks with high probability is one the loss would push away hardest, so it had better be a
  true negative.

The first ``num_negatives`` survivors, most similar first, are the anchor's hard negatives; an
anchor with fewer survivors gets ``-1`` ids (and NaN scores) in the remaining slots.

Memory: anchors are processed ``batch_size`` at a time, so what is held is the index, the ``(N, K)``
results and ``O(batch_size × candidates)`` per batch (plus ``batch_size × block_size`` float32 logits,
64 MiB by default, while the log-partition streams the corpus) — never ``N × M``. 100,000 anchors against 1,000,000 items with
K = 16 is a 12.8 MB result. The log-partition visits the whole corpus for each anchor, so it costs
``N × M × D`` multiply-adds; leave ``max_probability=None`` to search only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_positive_float
from contrastlab.io import atomic_path
from contrastlab.npyfile import NpyFormatError, load_npz
from contrastlab.search.index import EmbeddingIndex, _int_vector, _normalized, _positive_int, as_float32_matrix
from contrastlab.search.sharded import ShardedSearch
from contrastlab.search.softmax import log_partition

__all__ = ["MinedNegatives", "mine_hard_negatives", "per_anchor_negatives"]


class MinedNegatives(NamedTuple):
    """What :func:`mine_hard_negatives` returns (numpy arrays, one row per anchor).

    Attributes:
        ids: corpus ids of each anchor's hard negatives, most similar first; ``-1`` where fewer than
            ``num_negatives`` survived. Shape ``(N, K)`` int64.
        scores: their similarities to the anchor (NaN for ``-1``). Shape ``(N, K)`` float32.
        positive_scores: ``s(a_i, p_i)``. Shape ``(N,)`` float32.
        log_prob: ``log P(c | a_i)`` of each negative under the softmax search when
            ``max_probability`` was given (NaN for ``-1``), else ``None``. Shape ``(N, K)`` float64.
    """

    ids: np.ndarray
    scores: np.ndarray
    positive_scores: np.ndarray
    log_prob: np.ndarray | None

    @property
    def complete(self) -> np.ndarray:
        """Anchors with all ``K`` negatives. Shape ``(N,)`` bool."""
        return np.asarray((self.ids >= 0).all(axis=1))

    def save(self, path: str | Path) -> None:
        """Write the arrays to one ``.npz`` atomically (no pickled objects)."""
        arrays = {"ids": self.ids, "scores": self.scores, "positive_scores": self.positive_scores}
        if self.log_prob is not None:
            arrays["log_prob"] = self.log_prob
        with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
            np.savez(f, allow_pickle=False, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> MinedNegatives:
        """Read a :meth:`save` file (``allow_pickle=False``), checking the arrays' shapes agree.

        Raises:
            ValueError: naming ``path``, for a file that is not a consistent mined-negatives file.
        """
        try:
            z = load_npz(path, ("ids", "scores", "positive_scores"), optional=("log_prob",))
        except NpyFormatError as e:  # a member missing or malformed, or not an .npz at all
            raise ValueError(f"path {e} (not a mined-negatives file, or missing arrays)") from None
        ids, scores, pos, lp = z["ids"], z["scores"], z["positive_scores"], z.get("log_prob")
        if ids.ndim != 2 or ids.dtype != np.int64 or scores.shape != ids.shape or pos.shape != ids.shape[:1]:
            raise ValueError(f"path {path}: inconsistent arrays ids {ids.shape}, scores {scores.shape}, {pos.shape}")
        if lp is not None and lp.shape != ids.shape:
            raise ValueError(f"path {path}: log_prob has shape {lp.shape}, ids {ids.shape}")
        return cls(ids, scores, pos, lp)


class _IndexBlocks:
    """The index's stored vectors as a re-iterable of row blocks (the corpus of the log-partition)."""

    def __init__(self, index: EmbeddingIndex, rows: int) -> None:
        self.index, self.rows = index, rows

    def __iter__(self) -> Iterator[np.ndarray]:
        for start in range(0, self.index.ntotal, self.rows):
            yield self.index.vectors(start, min(start + self.rows, self.index.ntotal))


def mine_hard_negatives(
    index: EmbeddingIndex | ShardedSearch,
    anchors: Tensor | np.ndarray,
    positives: Tensor | np.ndarray,
    *,
    num_negatives: int,
    candidates: int | None = None,
    exclude_ids: Tensor | np.ndarray | None = None,
    margin: float | None = 0.0,
    max_probability: float | None = None,
    temperature: float = 0.05,
    batch_size: int = 4096,
    block_size: int | None = None,
) -> MinedNegatives:
    """Top-similarity corpus items per anchor that are not (likely) positives.

    Similarities are the index's metric (cosine: anchors and positives are L2-normalised here, as the
    index normalises its items; ``"ip"``: raw inner products).

    Shape:
        anchors, positives: ``(N, D)``; exclude_ids: ``(N,)``. Results: ``(N, num_negatives)``.

    Args:
        index: the corpus (any kind; exact with ``"flat"``), or a
            :class:`~contrastlab.search.sharded.ShardedSearch` over shards (exact; equal candidates are
            taken by ascending id).
        anchors: anchor embeddings, by the same encoder as the corpus.
        positives: each anchor's positive embedding (for the margin).
        num_negatives: K, negatives kept per anchor.
        candidates: nearest items searched per anchor before filtering (default ``4 K``, at most
            the corpus size minus one with ``exclude_ids``).
        exclude_ids: per anchor, the corpus id of its positive (or any id to leave out); ``None``
            leaves nothing out by id.
        margin: keep c only if ``s(a, c) ≤ s(a, p) − margin``; ``None`` disables the filter.
        max_probability: keep c only if ``P(c | a) ≤ max_probability`` under the softmax search at
            ``temperature`` over the whole index; ``None`` (default) disables it.
        temperature: τ of that softmax search (the model's training temperature).
        batch_size: anchors per faiss search and log-partition.
        block_size: corpus rows per block of the log-partition (default ``2^24 // batch_size``:
            64 MiB of float32 logits per block).

    Returns:
        :class:`MinedNegatives`.

    Raises:
        ValueError, TypeError: naming the argument — anchors or positives of another dimension than
            the index, mismatched rows, an empty index, ``num_negatives``/``candidates`` out of
            range, a negative margin, ``max_probability`` outside (0, 1], τ ≤ 0.
    """
    if not isinstance(index, (EmbeddingIndex, ShardedSearch)):
        raise TypeError(f"index must be an EmbeddingIndex or a ShardedSearch, got {type(index).__name__}")
    if index.ntotal == 0:
        raise ValueError("index is empty; add the corpus before mining")
    a = as_float32_matrix("anchors", anchors, dim=index.dim)
    p = as_float32_matrix("positives", positives, dim=index.dim)
    if p.shape[0] != a.shape[0]:
        raise ValueError(f"positives must have the N = {a.shape[0]} rows of anchors, got {p.shape[0]}")
    n = a.shape[0]
    excl = None if exclude_ids is None else _int_vector("exclude_ids", exclude_ids, n)
    k = _positive_int("num_negatives", num_negatives)
    limit = index.ntotal - (1 if excl is not None else 0)
    c = min(4 * k, limit) if candidates is None else _positive_int("candidates", candidates)
    if not k <= c <= limit:
        raise ValueError(f"candidates must be in [num_negatives = {k}, {limit}] (searchable items), got {c}")
    if margin is not None:
        margin = check_positive_float("margin", margin, allow_zero=True)
    if max_probability is not None:
        mp = check_positive_float("max_probability", max_probability)
        if mp > 1:
            raise ValueError(f"max_probability must be in (0, 1], got {mp}")
    tau = check_positive_float("temperature", temperature)
    batch_size = _positive_int("batch_size", batch_size)
    block_size = max(1, 2**24 // batch_size) if block_size is None else _positive_int("block_size", block_size)
    if index.metric == "cosine":
        a, p = _normalized("anchors", a), _normalized("positives", p)

    ids = np.full((n, k), -1, dtype=np.int64)
    scores = np.full((n, k), np.nan, dtype=np.float32)
    log_prob = None if max_probability is None else np.full((n, k), np.nan, dtype=np.float64)
    pos_scores = np.einsum("nd,nd->n", a, p).astype(np.float32)  # (N,)
    corpus = _IndexBlocks(index, block_size) if isinstance(index, EmbeddingIndex) else None
    log_cap = None if max_probability is None else math.log(max_probability)
    for s in range(0, n, batch_size):
        e = min(s + batch_size, n)
        res = index.search(a[s:e], c, exclude_ids=None if excl is None else excl[s:e], batch_size=batch_size)
        keep = np.ones(res.scores.shape, dtype=bool)  # (b, c)
        if margin is not None:
            keep &= res.scores <= pos_scores[s:e, None] - np.float32(margin)
        lp = None
        if log_cap is not None:
            if corpus is None:  # a sharded corpus: the merged log-partition of its shards
                assert isinstance(index, ShardedSearch)
                log_z = index.log_partition(a[s:e], temperature=tau, block_size=block_size).numpy()
            else:
                log_z = log_partition(torch.from_numpy(a[s:e]), corpus, temperature=tau, block_size=block_size).numpy()
            lp = res.scores.astype(np.float64) / tau - log_z[:, None]
            keep &= lp <= log_cap
        # the first k survivors of each row, in the search's order (most similar first)
        rank = np.cumsum(keep, axis=1) - 1
        rows, cols = np.nonzero(keep & (rank < k))
        slot = rank[rows, cols]
        ids[s + rows, slot] = res.ids[rows, cols]
        scores[s + rows, slot] = res.scores[rows, cols]
        if lp is not None and log_prob is not None:
            log_prob[s + rows, slot] = lp[rows, cols]
    return MinedNegatives(ids=ids, scores=scores, positive_scores=pos_scores, log_prob=log_prob)


def per_anchor_negatives(mined: MinedNegatives, rows: Tensor | np.ndarray, items: Tensor) -> Tensor:
    """The ``(n, K, ...)`` tensor of mined negatives for the anchors ``rows``, from the items by id.

    ``items[id]`` is the corpus item with that id (an embedding for :func:`~contrastlab.losses.info_nce`'s
    ``(N, K, D)`` negatives, or an encoder input that a training step embeds). Anchors must be
    complete (all K negatives found): pick them with ``mined.complete``.

    Shape:
        rows: ``(n,)``; items: ``(M, ...)``. Returns ``(n, K, ...)``.

    Raises:
        ValueError: naming ``rows``, for an anchor with missing negatives or an id beyond ``items``.
    """
    r = _int_vector("rows", rows, len(rows))
    ids = mined.ids[r]  # (n, K)
    if (ids < 0).any():
        bad = int(r[np.flatnonzero((ids < 0).any(axis=1))[0]])
        raise ValueError(f"rows: anchor {bad} has fewer than K = {ids.shape[1]} mined negatives (see .complete)")
    if ids.size and int(ids.max()) >= items.shape[0]:
        raise ValueError(f"rows: negative id {int(ids.max())} is beyond the {items.shape[0]} items")
    return items[torch.from_numpy(ids).to(items.device)]
