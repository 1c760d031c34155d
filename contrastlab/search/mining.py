"""Hard negatives mined from an :class:`~contrastlab.search.EmbeddingIndex`, false negatives filtered.

For each anchor a_i with positive p_i the index returns its ``candidates`` nearest corpus items (the
``range_max`` of sentence-transformers' ``mine_hard_negatives``); the anchor's own positives
(``exclude_ids``) are never candidates, and filters drop likely false negatives — items about as similar
to the anchor as its positive is, i.e. that would be positives too (:func:`candidate_filter`, pure):

* **margin** (``margin``): keep item c only if ``s(a_i, c) + margin ≤ s(a_i, p_i)`` (sentence-transformers'
  ``absolute_margin``; NV-Retriever, Moreira et al. 2024, arXiv 2407.15831, §3.2, names it "TopK-Abs");
  **relative margin**: ``s(a_i, c) ≤ s(a_i, p_i) − |s(a_i, p_i)|·relative_margin`` ("TopK-PercPos");
* **score bounds** (``max_score``, ``min_score``): keep c only if its similarity lies within them;
* **softmax-search probability** (``max_probability``): keep c only if the model's softmax search
  (Whiteley 2026, eq. 6) picks it with probability ``P(c | a_i) = exp(s(a_i, c)/τ) / Z(a_i) ≤
  max_probability``, where ``log Z(a_i)`` is the exact log-partition over the **whole** corpus
  (:func:`~contrastlab.search.log_partition`, streamed in blocks). A candidate the learned search
  already picks with high probability is one the loss would push away hardest, so it had better be a
  true negative. No peer has this filter: the margins compare c with one positive, this one with the
  whole corpus (a candidate can pass every margin and still hold, say, half the search's mass).

Of the survivors, most similar first, the first ``range_min`` are skipped and ``num_negatives`` are
picked (:func:`select_negatives`): the next ones (``sampling="top"``) or a random draw among the rest
(``"random"``, sentence-transformers' draw, seeded); an anchor with fewer survivors gets ``-1`` ids (and
NaN scores) in the remaining slots. The filters and the picking are pure functions of one block of
search results (:func:`negatives_from_candidates`), so a caller that searches another way (a sharded
corpus, its shards' results merged) reuses them as they are.

Memory: anchors are processed ``batch_size`` at a time, so what is held is the index, the ``(N, K)``
results and ``O(batch_size × candidates)`` per batch (plus ``batch_size × block_size`` float32 logits,
64 MiB by default, while the log-partition streams the corpus) — never ``N × M``. 100,000 anchors against 1,000,000 items with
K = 16 is a 12.8 MB result. The log-partition visits the whole corpus for each anchor, so it costs
``N × M × D`` multiply-adds; leave ``max_probability=None`` to search only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_positive_float, check_real
from contrastlab.io import atomic_path
from contrastlab.npyfile import NpyFormatError, load_npz
from contrastlab.search.index import EmbeddingIndex, _int_vector, _normalized, _positive_int, as_float32_matrix
from contrastlab.search.sharded import ShardedSearch
from contrastlab.search.softmax import log_partition

__all__ = [
    "MinedNegatives",
    "mine_hard_negatives",
    "per_anchor_negatives",
    "candidate_filter",
    "select_negatives",
    "negatives_from_candidates",
    "SAMPLINGS",
]


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


Sampling = Literal["top", "random"]
SAMPLINGS: tuple[str, ...] = ("top", "random")
"""How the negatives are picked among an anchor's surviving candidates (sentence-transformers' names)."""


def candidate_filter(
    scores: np.ndarray,
    positive_scores: np.ndarray,
    *,
    margin: float | None = None,
    relative_margin: float | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    log_prob: np.ndarray | None = None,
    max_log_prob: float | None = None,
) -> np.ndarray:
    """Which candidates survive the false-negative filters: a pure function of their scores.

    Keeps candidate c of anchor a (with positive score s⁺ = ``positive_scores[a]``) iff every given
    filter passes — the rules of sentence-transformers' ``mine_hard_negatives``, plus the last:

    * ``margin`` m: ``s(a, c) + m ≤ s⁺`` (its ``absolute_margin``);
    * ``relative_margin`` r: ``s(a, c) ≤ s⁺ − |s⁺|·r``;
    * ``max_score``: ``s(a, c) ≤ max_score``; ``min_score``: ``s(a, c) ≥ min_score``;
    * ``max_log_prob``: ``log P(c | a) ≤ max_log_prob`` for the softmax-search log-probabilities ``log_prob``.

    Shape:
        scores: ``(b, c)``; positive_scores: ``(b,)``; log_prob: ``(b, c)``. Returns ``(b, c)`` bool.
    """
    keep = np.ones(scores.shape, dtype=bool)
    pos = positive_scores[:, None]
    if margin is not None:
        keep &= ~(scores + np.float32(margin) > pos)
    if relative_margin is not None:
        keep &= ~(scores > pos - np.abs(pos) * np.float32(relative_margin))
    if max_score is not None:
        keep &= ~(scores > np.float32(max_score))
    if min_score is not None:
        keep &= ~(scores < np.float32(min_score))
    if max_log_prob is not None:
        if log_prob is None:
            raise ValueError("log_prob must be given with max_log_prob")
        keep &= log_prob <= max_log_prob
    return keep


def select_negatives(
    keep: np.ndarray,
    num_negatives: int,
    *,
    range_min: int = 0,
    sampling: Sampling = "top",
    rng: random.Random | None = None,
) -> np.ndarray:
    """The column of each anchor's picked negatives among its candidates, ``-1`` where none is left.

    Candidates are in search order (most similar first). The survivors (``keep``) of a row are ranked;
    the first ``range_min`` are skipped; ``"top"`` takes the next ``num_negatives``, ``"random"`` draws
    ``num_negatives`` of the remaining ``n`` ranks as sentence-transformers does —
    ``rng.sample(range(max(n, K)), K)`` per row, in row order, so ranks ≥ n come back missing — and
    returns them in search order (most similar first), missing last.

    Shape:
        keep: ``(b, c)`` bool. Returns ``(b, num_negatives)`` int64 columns into it.
    """
    b, _ = keep.shape
    k = num_negatives
    rank = np.cumsum(keep, axis=1) - 1 - range_min  # position among the survivors past range_min
    usable = keep & (rank >= 0)
    out = np.full((b, k), -1, dtype=np.int64)
    if sampling == "top":
        rows, cols = np.nonzero(usable & (rank < k))
        out[rows, rank[rows, cols]] = cols
        return out
    if rng is None:
        raise ValueError("rng must be given for sampling='random'")
    for i in range(b):
        cols = np.flatnonzero(usable[i])  # in search order
        picked = sorted(rng.sample(range(max(cols.size, k)), k=k))  # ranks; sorted = most similar first
        got = [int(cols[r]) for r in picked if r < cols.size]
        out[i, : len(got)] = got
    return out


def negatives_from_candidates(
    cand_ids: np.ndarray,
    cand_scores: np.ndarray,
    positive_scores: np.ndarray,
    *,
    num_negatives: int,
    candidates: int,
    exclude: np.ndarray | None = None,
    margin: float | None = None,
    relative_margin: float | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    log_prob: np.ndarray | None = None,
    max_log_prob: float | None = None,
    range_min: int = 0,
    sampling: Sampling = "top",
    rng: random.Random | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One block of anchors' negatives from their search results: the miner's whole selection, pure.

    ``cand_ids``/``cand_scores`` are each anchor's ``candidates + P`` nearest items, most similar first,
    its excluded ones included (``-1`` ids where the search found fewer); the ids in ``exclude`` are
    dropped, then :func:`candidate_filter`, then at most ``candidates`` survivors (the most similar) are
    kept and :func:`select_negatives` picks. A caller that searches shard by shard merges the shards'
    top ``candidates + P`` into these arrays and calls this; the result is the whole index's.

    Shape:
        cand_ids, cand_scores, log_prob: ``(b, c')``; positive_scores: ``(b,)``; exclude: ``(b, P)``
        (``-1`` pads). Returns ids ``(b, K)`` int64 (``-1`` missing), scores ``(b, K)`` float32 (NaN
        missing), log-probabilities ``(b, K)`` float64 or None.
    """
    valid = cand_ids >= 0
    if exclude is not None and exclude.shape[1]:
        valid &= ~((cand_ids[:, :, None] == exclude[:, None, :]) & (exclude[:, None, :] >= 0)).any(axis=2)
    keep = valid & candidate_filter(
        cand_scores, positive_scores, margin=margin, relative_margin=relative_margin, max_score=max_score,
        min_score=min_score, log_prob=log_prob, max_log_prob=max_log_prob,
    )  # fmt: skip
    keep &= np.cumsum(keep, axis=1) <= candidates  # at most `candidates` survivors (the most similar)
    cols = select_negatives(keep, num_negatives, range_min=range_min, sampling=sampling, rng=rng)  # (b, K)
    found = cols >= 0
    rows = np.arange(cols.shape[0])[:, None]
    safe = np.where(found, cols, 0)
    ids = np.where(found, cand_ids[rows, safe], -1).astype(np.int64)
    scores = np.where(found, cand_scores[rows, safe], np.nan).astype(np.float32)
    lp = None if log_prob is None else np.where(found, log_prob[rows, safe], np.nan)
    return ids, scores, lp


def _exclusions(name: str, x: Tensor | np.ndarray | None, n: int) -> np.ndarray | None:
    """``exclude_ids`` as ``(N, P)`` int64 (``-1`` pads), from ``(N,)`` or ``(N, P)``."""
    if x is None:
        return None
    arr = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if arr.ndim == 1:
        return _int_vector(name, arr, n)[:, None]
    if arr.ndim != 2 or arr.dtype.kind not in "iu" or arr.shape[0] != n or arr.shape[1] < 1:
        raise ValueError(
            f"{name} must be integer ids of shape (N,) or (N, P) with N = {n}, got {arr.dtype} {arr.shape}"
        )
    return arr.astype(np.int64, copy=False)


def _optional_real(name: str, value: float | None, *, nonnegative: bool = False) -> float | None:
    if value is None:
        return None
    v = check_real(name, value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if nonnegative and v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def mine_hard_negatives(
    index: EmbeddingIndex | ShardedSearch,
    anchors: Tensor | np.ndarray,
    positives: Tensor | np.ndarray,
    *,
    num_negatives: int,
    candidates: int | None = None,
    exclude_ids: Tensor | np.ndarray | None = None,
    margin: float | None = 0.0,
    relative_margin: float | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    range_min: int = 0,
    sampling: Sampling = "top",
    seed: int = 0,
    max_probability: float | None = None,
    temperature: float = 0.05,
    batch_size: int = 4096,
    block_size: int | None = None,
) -> MinedNegatives:
    """Top-similarity corpus items per anchor that are not (likely) positives.

    Similarities are the index's metric (cosine: anchors and positives are L2-normalised here, as the
    index normalises its items; ``"ip"``: raw inner products). Per anchor: the ``candidates`` most
    similar items not in ``exclude_ids`` (sentence-transformers' ``range_max``), then
    :func:`candidate_filter`, then :func:`select_negatives` (``range_min``, ``sampling``).

    Shape:
        anchors, positives: ``(N, D)``; exclude_ids: ``(N,)`` or ``(N, P)``. Results: ``(N, num_negatives)``.

    Args:
        index: the corpus (any kind; exact with ``"flat"``), or a
            :class:`~contrastlab.search.sharded.ShardedSearch` over shards (exact; equal candidates are
            taken by ascending id).
        anchors: anchor embeddings, by the same encoder as the corpus.
        positives: each anchor's positive embedding (for the margins; with several positives, the one
            of lowest score, as sentence-transformers takes).
        num_negatives: K, negatives kept per anchor.
        candidates: C, sentence-transformers' ``range_max`` (default ``4 K + range_min``): as it does,
            the ``C + P`` nearest items are searched (P = ``exclude_ids`` per anchor), the excluded ones
            dropped, the rest filtered, and at most C survivors, the most similar, kept; where the corpus
            has fewer, the missing ones count as filtered out.
        exclude_ids: per anchor, the corpus ids of its positives (``-1`` pads a row of ``(N, P)``), never
            candidates; ``None`` leaves nothing out by id.
        margin: keep c only if ``s(a, c) + margin ≤ s(a, p)``; ``None`` disables the filter.
        relative_margin: keep c only if ``s(a, c) ≤ s(a, p) − |s(a, p)|·relative_margin``; ``None`` disables it.
        max_score: keep c only if ``s(a, c) ≤ max_score``; ``None`` disables it.
        min_score: keep c only if ``s(a, c) ≥ min_score``; ``None`` disables it.
        range_min: skip the first ``range_min`` surviving candidates (the most similar) of each anchor.
        sampling: ``"top"`` (the most similar survivors) or ``"random"`` (K drawn among them).
        seed: seed of ``random.Random`` for ``"random"`` sampling (one draw per anchor, in order).
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
            the index, mismatched rows, an empty index, ``num_negatives``/``candidates``/``range_min``
            out of range (``range_min`` must be smaller than ``candidates``), a negative margin or
            relative margin, a non-finite score bound, ``min_score > max_score``, ``max_probability``
            outside (0, 1], τ ≤ 0, an unknown ``sampling``.
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
    excl = _exclusions("exclude_ids", exclude_ids, n)
    k = _positive_int("num_negatives", num_negatives)
    limit = index.ntotal - (1 if excl is not None else 0)
    if isinstance(range_min, bool) or not isinstance(range_min, int) or range_min < 0:
        raise ValueError(f"range_min must be an int >= 0, got {range_min!r}")
    c = min(4 * k + range_min, limit) if candidates is None else _positive_int("candidates", candidates)
    if range_min >= c:
        raise ValueError(f"range_min must be smaller than candidates (range_max) = {c}, got range_min = {range_min}")
    if not k + range_min <= c <= limit:
        raise ValueError(
            f"candidates must be in [num_negatives + range_min = {k + range_min}, {limit}] (searchable items), got {c}"
        )
    margin = _optional_real("margin", margin, nonnegative=True)
    relative_margin = _optional_real("relative_margin", relative_margin, nonnegative=True)
    max_score = _optional_real("max_score", max_score)
    min_score = _optional_real("min_score", min_score)
    if max_score is not None and min_score is not None and min_score > max_score:
        raise ValueError(f"min_score must be <= max_score = {max_score}, got {min_score}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
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
    rng = random.Random(seed)
    k_search = min(c + (0 if excl is None else excl.shape[1]), index.ntotal)  # the positives included
    for s in range(0, n, batch_size):
        e = min(s + batch_size, n)
        res = index.search(a[s:e], k_search, batch_size=batch_size)
        lp = None
        if log_cap is not None:
            if corpus is None:  # a sharded corpus: the merged log-partition of its shards
                assert isinstance(index, ShardedSearch)
                log_z = index.log_partition(a[s:e], temperature=tau, block_size=block_size).numpy()
            else:
                log_z = log_partition(torch.from_numpy(a[s:e]), corpus, temperature=tau, block_size=block_size).numpy()
            lp = res.scores.astype(np.float64) / tau - log_z[:, None]
        block = negatives_from_candidates(
            res.ids, res.scores, pos_scores[s:e], num_negatives=k, candidates=c,
            exclude=None if excl is None else excl[s:e], margin=margin,
            relative_margin=relative_margin, max_score=max_score, min_score=min_score, log_prob=lp,
            max_log_prob=log_cap, range_min=range_min, sampling=sampling, rng=rng,
        )  # fmt: skip
        ids[s:e], scores[s:e] = block[0], block[1]
        if log_prob is not None and block[2] is not None:
            log_prob[s:e] = block[2]
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
