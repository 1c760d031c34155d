"""Exact search over a corpus split into shards: the per-shard work and the merges, independent of the engine.

A corpus of ``N`` rows is split into ``S`` shards, each a pair ``(ids, embeddings)`` with ids unique across
the corpus. Every corpus-wide quantity is computed shard by shard and merged exactly:

* **top-k** — each shard returns its own top-``k`` under the total order *(score descending, id
  ascending)* (:func:`exact_topk`: faiss's order among equal scores is arbitrary, so ties reaching the
  k-th place are resolved by searching deeper until the tie is inside the results); the corpus's top-``k``
  under the same order is the top-``k`` of the union, so the merged ids equal those of one flat index over
  the whole corpus with the same tie rule, whatever the split. The merge moves ``S × k`` (score, id)
  pairs per query, ``S × k × (4 + 8)`` bytes.
* **log-partition** — ``log Z(q) = log Σ_s Z_s(q)``: the float64 log-sum-exp of the shards' float64
  log-partitions (:func:`merge_log_partitions`), each streamed by
  :func:`~contrastlab.search.softmax.log_partition`. ``S`` float64 per query.
* **softmax-search probabilities** — ``log P(i | q) = s ⟨q, ξ_i⟩ − log Z(q)``: the shard that holds item
  ``i`` returns its logit, every shard its ``log Z_s``.
* **entropy** — the mixture identity ``H = Σ_s w_s H_s − Σ_s w_s log w_s`` with ``w_s = Z_s / Z``.

With one shard every merge is the identity (a log-sum-exp of one value is that value), so one shard
run in process computes exactly what the one-process functions compute.

:class:`ShardedSearch` runs these merges over a *shard group*: anything with ``call(method, *args)``
returning the list of every shard's :class:`ShardSearcher` result, in shard order. :class:`LocalShards`
calls them in this process; ``contrastlab.scale.sharded_search`` holds each in a Ray actor. The engine
changes where the per-shard code runs, never what it computes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_choice
from contrastlab.search.index import (
    EmbeddingIndex,
    SearchResult,
    _int_vector,
    _normalized,
    _positive_int,
    as_float32_matrix,
)
from contrastlab.search.softmax import (
    SoftmaxSearch,
    _as_tensor,
    _scale_of,
    entropy,
    item_logits_and_log_partition,
    log_partition,
)

__all__ = [
    "split_rows",
    "unit_rows",
    "ShardInfo",
    "ShardSearcher",
    "ShardGroup",
    "LocalShards",
    "ShardedSearch",
    "exact_topk",
    "merge_topk",
    "merge_log_partitions",
]


def split_rows(embeddings: np.ndarray, shards: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``shards`` contiguous runs of rows, each with its row positions as ids (at most one shard per row).

    Shape:
        embeddings: ``(N, D)``. Returns ``[(ids (n_s,), embeddings (n_s, D)), …]``.
    """
    rows = np.array_split(np.arange(embeddings.shape[0]), min(shards, embeddings.shape[0]))
    return [(r, embeddings[r]) for r in rows]


def unit_rows(name: str, x: Tensor | np.ndarray) -> Tensor:
    """The rows of ``x`` L2-normalised exactly as a cosine :class:`ShardSearcher` normalises its own rows.

    float32 rows as the faiss index stores them (a float32 division by the float32 norm), float64 rows in
    float64 (``torch.nn.functional.normalize``); other dtypes are cast to float32 first. Queries normalised
    here give the softmax-search logits of the unit query against the unit documents, whatever their norm.

    Shape:
        x: ``(n, D)``. Returns ``(n, D)`` float32 or float64.

    Raises:
        ValueError, TypeError: naming ``name``: not ``(n, D)`` floats, a non-finite entry, or a row of zero norm
            (it has no direction).
    """
    t = _as_tensor(name, x).detach().cpu()  # (n, D), finite
    if t.dtype != torch.float64:
        return torch.from_numpy(_normalized(name, as_float32_matrix(name, t)))
    zero = torch.nonzero(torch.linalg.vector_norm(t, dim=1) == 0)
    if zero.numel():
        raise ValueError(f"{name} row {int(zero[0, 0])} has zero norm; cosine similarity is undefined for it")
    return torch.nn.functional.normalize(t, dim=1)


TIE_MARGIN = 32
"""How much deeper than ``k`` :func:`exact_topk` searches first. Equal float32 scores are not rare: 10^6
random unit vectors in 128 dimensions split in two shards, 1,000 random queries, top-10: one query has two
equal scores at the 10th and 11th place of one shard. With one extra result, each such tie costs a second
search of the whole batch (that shard's time again: the sharded search measured 1.7× the flat one). 32 more results
cost faiss no measurable time (its cost is the matrix product, not its heap), and only more than 33 equal
scores at the k-th place, as exact duplicates give, need the second search."""


def exact_topk(
    index: EmbeddingIndex, queries: np.ndarray, k: int, *, batch_size: int = 16384
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact top-``k`` of a flat index under the order (score descending, id ascending).

    faiss returns equal scores in no particular order, and a tie that straddles the k-th place may leave
    out an item with a smaller id. The search goes ``TIE_MARGIN`` deeper than ``k``: when the last score is
    below the k-th, every item tied with the k-th is among the results (faiss returns the best ``depth``
    items, so it cannot have left out one scoring above the last). Otherwise (more than ``TIE_MARGIN`` + 1
    items share the k-th score, as exact duplicates do) the search is repeated twice as deep until the last
    score is below the k-th one, or the whole index is returned. The whole batch is re-searched, never a
    subset: faiss's BLAS path rounds a score differently with the number of queries in the batch, so only
    the same batch gives the same scores.

    Shape:
        queries: ``(Q, D)``. Returns scores ``(Q, k')`` float32, ids and positions ``(Q, k')`` int64,
        with ``k' = min(k, N)``.

    Args:
        index: an exact (``kind="flat"``) index.
        queries: the queries.
        k: results per query.
        batch_size: queries per faiss call.

    Returns:
        ``(scores, ids, positions)``, best first.
    """
    if index.kind != "flat":
        raise ValueError(f"index must be exact (kind='flat') for an exact top-k, got kind={index.kind!r}")
    n = index.ntotal
    k = min(_positive_int("k", k), n)
    depth = min(k + TIE_MARGIN, n)
    while True:
        res = index.search(queries, depth, batch_size=batch_size)
        if depth == n or not (res.scores[:, k - 1] == res.scores[:, depth - 1]).any():
            break
        depth = min(2 * depth, n)
    order = np.lexsort((res.ids, -res.scores), axis=-1)[:, :k]
    return (
        np.take_along_axis(res.scores, order, 1),
        np.take_along_axis(res.ids, order, 1),
        np.take_along_axis(res.positions, order, 1),
    )


def merge_topk(
    scores: Sequence[np.ndarray],
    ids: Sequence[np.ndarray],
    k: int,
    *,
    payload: Sequence[np.ndarray] | None = None,
    exclude_ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Merge per-shard top lists into the top-``k`` of their union by (score descending, id ascending).

    With ``exclude_ids``, the entry whose id equals the query's is dropped before the cut (each shard must
    then have returned ``k + 1`` results, or all it holds).

    Shape:
        scores, ids, payload: one ``(Q, k_s)`` array per shard. exclude_ids: ``(Q,)``. Returns ``(Q, k)``.

    Returns:
        ``(scores, ids, payload)`` of the merged top-``k`` (payload: e.g. global positions, or ``None``).
    """
    s = np.concatenate(scores, axis=1)
    i = np.concatenate(ids, axis=1)
    keys: tuple[np.ndarray, ...] = (i, -s)
    if exclude_ids is not None:
        keys = (*keys, i == exclude_ids[:, None])  # the last key is the primary one: excluded entries go last
    order = np.lexsort(keys, axis=-1)[:, :k]
    p = None if payload is None else np.take_along_axis(np.concatenate(payload, axis=1), order, 1)
    return np.take_along_axis(s, order, 1), np.take_along_axis(i, order, 1), p


def merge_log_partitions(parts: Sequence[Tensor]) -> Tensor:
    """``log Σ_s exp(log Z_s)`` per query, in float64 (one part is returned as it is).

    Shape:
        parts: ``S`` tensors ``(Q,)``. Returns ``(Q,)`` float64.
    """
    return torch.logsumexp(torch.stack([p.double() for p in parts]), dim=0)


@dataclass(frozen=True)
class ShardInfo:
    """What a shard holds.

    Attributes:
        rows: number of embeddings.
        dim: their dimension ``D``.
        id_min: smallest id.
        id_max: largest id.
        dtype: the embeddings' dtype name (``"float32"``, ``"float64"``).
    """

    rows: int
    dim: int
    id_min: int
    id_max: int
    dtype: str


class ShardSearcher:
    """One shard of a corpus: an exact :class:`EmbeddingIndex` for top-k and its vectors for the softmax search.

    The softmax-search logits are ``scale · ⟨q, ξ⟩`` over the shard's vectors ``ξ``: the embeddings as
    given for ``metric="ip"``; for ``metric="cosine"`` their unit vectors — float32 ones exactly as the
    index stores them, float64 ones normalised in float64 (:func:`unit_rows`). Queries are
    used as given by the softmax-search methods (pass :func:`unit_rows` of them for cosine logits); the
    top-k normalises them as the index does.

    Memory: the index's float32 copy plus the vectors (``2 × rows × D`` numbers).

    Args:
        ids: ``(n,)`` unique integer ids.
        embeddings: ``(n, D)`` float tensor or array.
        metric: ``"cosine"`` or ``"ip"``.
    """

    def __init__(self, ids: Tensor | np.ndarray, embeddings: Tensor | np.ndarray, *, metric: str = "cosine") -> None:
        metric = check_choice("metric", metric, ("cosine", "ip"))
        emb = _as_tensor("embeddings", embeddings)
        if emb.dtype not in (torch.float32, torch.float64):
            emb = emb.float()
        n, d = emb.shape
        self.ids = _int_vector("ids", ids, n)
        self.index = EmbeddingIndex(d, metric=metric, kind="flat")
        self.index.add(emb.detach().numpy(), ids=self.ids)
        if metric == "ip":
            self.vectors = emb
        elif emb.dtype == torch.float32:
            self.vectors = torch.from_numpy(self.index.vectors())
        else:
            self.vectors = unit_rows("embeddings", emb)
        self._sorted = np.argsort(self.ids, kind="stable")

    def info(self) -> ShardInfo:
        """Rows, dimension, id range and dtype of this shard."""
        return ShardInfo(
            rows=int(self.ids.shape[0]),
            dim=int(self.vectors.shape[1]),
            id_min=int(self.ids.min()),
            id_max=int(self.ids.max()),
            dtype=str(self.vectors.dtype).removeprefix("torch."),
        )

    def all_ids(self) -> np.ndarray:
        """``(n,)`` the shard's ids in row order."""
        return self.ids

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Row positions in this shard of the given ids, ``-1`` for ids it does not hold (any shape)."""
        flat = ids.reshape(-1)
        at = np.searchsorted(self.ids, flat, sorter=self._sorted).clip(0, self.ids.shape[0] - 1)
        rows = self._sorted[at]
        return np.where(self.ids[rows] == flat, rows, -1).reshape(ids.shape)

    def topk(self, queries: np.ndarray, k: int, batch_size: int = 16384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`exact_topk` of this shard: ``(scores, ids, row positions)``, ``(Q, min(k, n))``."""
        return exact_topk(self.index, queries, k, batch_size=batch_size)

    def log_partition(self, queries: Tensor, scale: float, block_size: int | None = None) -> Tensor:
        """``log Σ_{ξ in shard} exp(scale ⟨q, ξ⟩)`` per query, ``(Q,)`` float64."""
        return log_partition(queries, self.vectors, scale=scale, block_size=block_size)

    def item_logits(
        self, queries: Tensor, ids: np.ndarray, scale: float, block_size: int | None = None
    ) -> tuple[Tensor, np.ndarray, Tensor]:
        """Logits of the listed items that this shard holds, and its log-partition, in one pass.

        Shape:
            ids: ``(Q, M)``. Returns logits ``(Q, M)`` float64 (0 where not held), held ``(Q, M)`` bool and
            ``log Z_s`` ``(Q,)`` float64.
        """
        rows = self.rows_of(ids)
        held = rows >= 0
        picked, log_z, _ = item_logits_and_log_partition(
            queries, self.vectors, torch.from_numpy(np.where(held, rows, 0)), scale=scale, block_size=block_size
        )
        return picked, held, log_z

    def entropy_parts(self, queries: Tensor, scale: float, block_size: int | None = None) -> tuple[Tensor, Tensor]:
        """``(log Z_s, H_s)`` per query: the shard's log-partition and the entropy of its own softmax search."""
        return (
            log_partition(queries, self.vectors, scale=scale, block_size=block_size),
            entropy(SoftmaxSearch(queries, self.vectors, scale), block_size=block_size),
        )


class ShardGroup(Protocol):
    """Where the shards live: runs one :class:`ShardSearcher` method on every shard."""

    def call(self, method: str, *args: Any) -> list[Any]:
        """``[getattr(shard, method)(*args) for shard in shards]``, in shard order, wherever they run."""
        ...

    def close(self) -> None:
        """Release the shards."""
        ...


class LocalShards:
    """Shards held and searched in this process, one after the other.

    Args:
        shards: the :class:`ShardSearcher` of each shard, in order.
    """

    def __init__(self, shards: Sequence[ShardSearcher]) -> None:
        self.shards = list(shards)

    def call(self, method: str, *args: Any) -> list[Any]:
        """Run ``method`` on each shard in turn."""
        return [getattr(s, method)(*args) for s in self.shards]

    def close(self) -> None:
        """Drop the shards."""
        self.shards = []


class ShardedSearch:
    """Exact search and softmax search over a corpus split into shards, with exact merges.

    Built by :meth:`local` (shards in this process) or ``contrastlab.scale.sharded_search.ray_sharded_search``
    (one Ray actor per shard); both run the same :class:`ShardSearcher` code. It exposes what
    :func:`~contrastlab.search.mine_hard_negatives` uses of an index (``ntotal``, ``dim``, ``metric``,
    ``kind``, ``search``), so the miner runs over shards unchanged.

    Rows are numbered shard after shard (``positions`` of :meth:`search`); items of the softmax search are
    named by id.

    Args:
        group: the shard group.
        metric: the shards' metric.
    """

    kind = "flat"

    def __init__(self, group: ShardGroup, *, metric: str) -> None:
        self.group = group
        self.metric = check_choice("metric", metric, ("cosine", "ip"))
        self.infos: list[ShardInfo] = group.call("info")
        if not self.infos:
            raise ValueError("shards: the corpus has no shard")
        dims = {i.dim for i in self.infos}
        if len(dims) != 1:
            raise ValueError(f"shards: the shards disagree on the dimension D ({sorted(dims)})")
        self.dim = dims.pop()
        self.offsets = np.cumsum([0] + [i.rows for i in self.infos])
        self.ntotal = int(self.offsets[-1])
        self._check_unique_ids()

    def _check_unique_ids(self) -> None:
        spans = sorted((i.id_min, i.id_max) for i in self.infos)
        if all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)):
            return  # disjoint id ranges: unique across shards (each shard's index checked its own)
        ids = np.concatenate(self.group.call("all_ids"))
        uniq, counts = np.unique(ids, return_counts=True)
        if uniq.shape[0] != ids.shape[0]:
            raise ValueError(f"shards: id {int(uniq[counts > 1][0])} occurs in more than one shard")

    @classmethod
    def local(
        cls, shards: Iterable[tuple[Tensor | np.ndarray, Tensor | np.ndarray]], *, metric: str = "cosine"
    ) -> ShardedSearch:
        """Shards held in this process, from ``(ids, embeddings)`` pairs."""
        return cls(LocalShards([ShardSearcher(i, e, metric=metric) for i, e in shards]), metric=metric)

    @property
    def num_shards(self) -> int:
        """``S``, the number of shards."""
        return len(self.infos)

    def __len__(self) -> int:
        return self.ntotal

    def __repr__(self) -> str:
        return f"ShardedSearch(dim={self.dim}, metric={self.metric!r}, ntotal={self.ntotal}, shards={self.num_shards})"

    def close(self) -> None:
        """Release the shards (Ray actors end)."""
        self.group.close()

    # ------------------------------------------------------------------ top-k
    def search(
        self,
        queries: Tensor | np.ndarray,
        k: int,
        *,
        exclude_ids: Tensor | np.ndarray | None = None,
        batch_size: int = 16384,
    ) -> SearchResult:
        """The exact top-``k`` over every shard, by (score descending, id ascending).

        Shape:
            queries: ``(Q, D)``; exclude_ids: ``(Q,)``. Results ``(Q, k)``; ``positions`` number the rows
            shard after shard; ``labels`` is ``None``.

        Args:
            queries: query vectors (normalised by the shards for ``metric="cosine"``).
            k: results per query, ``1 ≤ k ≤ N`` (``N − 1`` with ``exclude_ids``).
            exclude_ids: per query, an id left out of its results.
            batch_size: queries per faiss call in each shard.

        Raises:
            ValueError, TypeError: invalid queries, or ``k`` out of range.
        """
        xq = as_float32_matrix("queries", queries, dim=self.dim)
        excl = None if exclude_ids is None else _int_vector("exclude_ids", exclude_ids, xq.shape[0])
        k = _positive_int("k", k)
        limit = self.ntotal - (1 if excl is not None else 0)
        if k > limit:
            raise ValueError(f"k = {k} exceeds the {limit} items that can be returned from this corpus")
        batch_size = _positive_int("batch_size", batch_size)
        parts = self.group.call("topk", xq, k + (1 if excl is not None else 0), batch_size)
        positions = [p + off for (_, _, p), off in zip(parts, self.offsets, strict=False)]
        scores, ids, pos = merge_topk(
            [s for s, _, _ in parts], [i for _, i, _ in parts], k, payload=positions, exclude_ids=excl
        )
        assert pos is not None
        return SearchResult(scores=scores, positions=pos, ids=ids, labels=None)

    # ------------------------------------------------------------------ softmax search
    def _queries(self, queries: Tensor | np.ndarray) -> Tensor:
        q = _as_tensor("queries", queries)
        if q.shape[1] != self.dim:
            raise ValueError(f"queries has dimension D = {q.shape[1]} but the corpus has D = {self.dim}")
        return q.cpu()

    def log_partition(
        self,
        queries: Tensor | np.ndarray,
        *,
        temperature: float | None = None,
        scale: float | None = None,
        block_size: int | None = None,
        average: bool = False,
    ) -> Tensor:
        """``log Σ_i exp(⟨q, ξ_i⟩ / τ)`` over every shard (see :func:`~contrastlab.search.log_partition`).

        Shape:
            queries: ``(Q, D)``. Returns ``(Q,)`` float64 (minus ``log N`` with ``average``).
        """
        s = _scale_of(temperature, scale)
        log_z = merge_log_partitions(self.group.call("log_partition", self._queries(queries), s, block_size))
        return log_z - math.log(self.ntotal) if average else log_z

    def log_prob(
        self,
        queries: Tensor | np.ndarray,
        ids: Tensor | np.ndarray,
        *,
        temperature: float | None = None,
        scale: float | None = None,
        block_size: int | None = None,
    ) -> Tensor:
        """``log P(i | q)`` of the items with the given ids under the softmax search over every shard.

        Shape:
            queries: ``(Q, D)``; ids: ``(Q,)`` or ``(Q, M)``. Returns float64 of the shape of ``ids``.

        Raises:
            ValueError, TypeError: an id held by no shard, or mismatched shapes.
        """
        s = _scale_of(temperature, scale)
        q = self._queries(queries)
        it = ids.detach().cpu().numpy() if isinstance(ids, Tensor) else np.asarray(ids)
        if it.dtype.kind not in "iu":
            raise TypeError(f"ids must be an integer tensor or array, got dtype {it.dtype}")
        squeeze = it.ndim == 1
        it2 = it[:, None] if squeeze else it
        if it2.ndim != 2 or it2.shape[0] != q.shape[0]:
            raise ValueError(f"ids must have shape (Q,) or (Q, M) with Q = {q.shape[0]}, got {it.shape}")
        parts = self.group.call("item_logits", q, it2.astype(np.int64), s, block_size)
        held = np.sum([h for _, h, _ in parts], axis=0)
        if (held != 1).any():
            bad = int(it2[held != 1][0])
            raise ValueError(f"ids: id {bad} is held by {int(held[held != 1][0])} shards (exactly one expected)")
        picked = torch.zeros(it2.shape, dtype=torch.float64)
        for logits, h, _ in parts:
            picked += torch.where(torch.from_numpy(np.array(h)), logits, torch.zeros((), dtype=torch.float64))
        out = picked - merge_log_partitions([z for _, _, z in parts])[:, None]
        return out[:, 0] if squeeze else out

    def entropy(
        self,
        queries: Tensor | np.ndarray,
        *,
        temperature: float | None = None,
        scale: float | None = None,
        block_size: int | None = None,
    ) -> Tensor:
        """Entropy of the softmax search over every shard, ``Σ_s w_s H_s − Σ_s w_s log w_s`` (``w_s = Z_s/Z``).

        Shape:
            queries: ``(Q, D)``. Returns ``(Q,)`` float64.
        """
        s = _scale_of(temperature, scale)
        parts = self.group.call("entropy_parts", self._queries(queries), s, block_size)
        log_zs = torch.stack([z.double() for z, _ in parts])  # (S, Q)
        log_w = log_zs - torch.logsumexp(log_zs, dim=0)
        w = log_w.exp()
        return (w * torch.stack([h.double() for _, h in parts])).sum(0) - (w * log_w).sum(0)
