"""Retrieval metrics on ranked results, and a one-call evaluation of an :class:`EmbeddingIndex`.

Every metric takes a boolean *hit matrix* ``hits[q, j]`` (is the ``j``-th retrieved item relevant to
query ``q``; rank order, the query itself already excluded) and ``n_relevant[q]``, the number of relevant
items in the corpus for ``q`` (the query itself not counted). Queries with no relevant item ("lone"
queries) are left out of every average, as pytorch-metric-learning (PML) does.

Definitions (``R = n_relevant``, ranks ``j = 1 … K``):

- ``recall@k`` ("any"): 1 if a relevant item is in the top ``k`` (PML's ``precision_at_1`` for ``k = 1``;
  the WEINCE "R@k").
- ``recall_fraction@k``: (relevant items in the top ``k``) / ``R``.
- ``precision@1``: 1 if the top item is relevant.
- ``r_precision``: (relevant items in the top ``R``) / ``R`` (PML ``r_precision``).
- ``map@r``: ``(1/R) Σ_{j ≤ R, hit_j} precision@j`` (PML ``mean_average_precision_at_r``, Musgrave et al.
  2020, "A metric learning reality check").
- ``average_precision``: ``(1/R) Σ_{j ≤ K, hit_j} precision@j``; with ``K = N`` it is scikit-learn's
  ``average_precision_score`` of the query's full ranking.
- ``mrr``: ``1 / (rank of the first relevant item)``, 0 if none is retrieved within ``K``.
- ``ndcg@k``: binary-relevance ``DCG@k / IDCG@k`` with gains ``1 / log2(j + 1)``
  (scikit-learn ``ndcg_score`` with ``k``).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from contrastlab._checks import check_choice
from contrastlab.search.index import EmbeddingIndex, _int_vector, _positive_int, _progress

__all__ = [
    "hits_from_labels",
    "recall_at_k",
    "precision_at_1",
    "r_precision",
    "map_at_r",
    "average_precision",
    "mrr",
    "ndcg_at_k",
    "evaluate_retrieval",
]


def _hits(hits: object) -> np.ndarray:
    arr = hits.detach().cpu().numpy() if isinstance(hits, Tensor) else np.asarray(hits)
    if arr.ndim != 2:
        raise ValueError(f"hits must have shape (Q, K), got {arr.shape}")
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "iu" or not np.isin(arr, (0, 1)).all():
            raise TypeError(f"hits must be boolean (or 0/1 integers), got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def _nrel(n_relevant: object, q: int) -> np.ndarray:
    arr = _int_vector("n_relevant", n_relevant, q)
    if (arr < 0).any():
        raise ValueError("n_relevant must be >= 0")
    return arr


def _reduce(per_query: np.ndarray, n_relevant: np.ndarray, reduction: str) -> float | np.ndarray:
    """Mean over non-lone queries (NaN if all are lone), or the per-query values (NaN for lone queries)."""
    check_choice("reduction", reduction, ("mean", "none"))
    valid = n_relevant > 0
    if reduction == "none":
        return np.where(valid, per_query, np.nan)
    return float(per_query[valid].mean()) if valid.any() else float("nan")


def hits_from_labels(retrieved_labels: object, query_labels: object) -> np.ndarray:
    """``hits[q, j] = retrieved_labels[q, j] == query_labels[q]``.

    Shape:
        retrieved_labels: ``(Q, K)``; query_labels: ``(Q,)``. Returns ``(Q, K)`` bool.
    """
    r = (
        retrieved_labels.detach().cpu().numpy()
        if isinstance(retrieved_labels, Tensor)
        else np.asarray(retrieved_labels)
    )
    if r.ndim != 2:
        raise ValueError(f"retrieved_labels must have shape (Q, K), got {r.shape}")
    ql = _int_vector("query_labels", query_labels, r.shape[0])
    return r == ql[:, None]


def _check_k(k: int, hits: np.ndarray) -> int:
    k = _positive_int("k", k)
    if k > hits.shape[1]:
        raise ValueError(f"k = {k} exceeds the {hits.shape[1]} retrieved columns of hits")
    return k


def _check_depth_r(hits: np.ndarray, n_relevant: np.ndarray, metric: str) -> None:
    need = int(n_relevant.max(initial=0))
    if need > hits.shape[1]:
        raise ValueError(
            f"hits has K = {hits.shape[1]} columns but {metric} needs the top R = {need} (the largest n_relevant)"
        )


def recall_at_k(
    hits: object, n_relevant: object, k: int, *, mode: str = "any", reduction: str = "mean"
) -> float | np.ndarray:
    """Recall@k: ``mode="any"`` — a relevant item in the top ``k``; ``"fraction"`` — share of ``R`` retrieved.

    Shape:
        hits: ``(Q, K)`` bool; n_relevant: ``(Q,)``. ``reduction="none"`` returns ``(Q,)``.
    """
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    k = _check_k(k, h)
    check_choice("mode", mode, ("any", "fraction"))
    found = h[:, :k].sum(axis=1)
    per = (found > 0).astype(np.float64) if mode == "any" else found / np.maximum(r, 1)
    return _reduce(per, r, reduction)


def precision_at_1(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Precision@1 (PML ``precision_at_1``): is the top retrieved item relevant."""
    h = _hits(hits)
    return _reduce(h[:, 0].astype(np.float64), _nrel(n_relevant, h.shape[0]), reduction)


def r_precision(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """R-precision (PML ``r_precision``): relevant items among the top ``R``, divided by ``R``.

    Raises:
        ValueError: ``hits`` has fewer than ``max R`` columns.
    """
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    _check_depth_r(h, r, "r_precision")
    within = np.arange(h.shape[1])[None, :] < r[:, None]  # (Q, K): rank j <= R
    per = (h & within).sum(axis=1) / np.maximum(r, 1)
    return _reduce(per, r, reduction)


def _ap(h: np.ndarray, r: np.ndarray, within: np.ndarray | None) -> np.ndarray:
    mask = h if within is None else h & within
    prec = np.cumsum(mask, axis=1) / np.arange(1, h.shape[1] + 1)[None, :]  # precision@j counting masked hits
    return (prec * mask).sum(axis=1) / np.maximum(r, 1)


def map_at_r(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """MAP@R (PML ``mean_average_precision_at_r``): ``(1/R) Σ_{j ≤ R} hit_j · precision@j``.

    Raises:
        ValueError: ``hits`` has fewer than ``max R`` columns.
    """
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    _check_depth_r(h, r, "map@r")
    within = np.arange(h.shape[1])[None, :] < r[:, None]
    return _reduce(_ap(h, r, within), r, reduction)


def average_precision(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Average precision over the retrieved depth ``K``: ``(1/R) Σ_{j ≤ K} hit_j · precision@j``.

    Equals scikit-learn's ``average_precision_score`` when ``K = N`` (the full ranking).
    """
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    return _reduce(_ap(h, r, None), r, reduction)


def mrr(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Mean reciprocal rank within the retrieved depth (PML ``mean_reciprocal_rank`` with the same ``k``)."""
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    any_hit = h.any(axis=1)
    per = np.where(any_hit, 1.0 / (h.argmax(axis=1) + 1.0), 0.0)
    return _reduce(per, r, reduction)


def ndcg_at_k(hits: object, n_relevant: object, k: int, *, reduction: str = "mean") -> float | np.ndarray:
    """NDCG@k, binary relevance: ``Σ_{j ≤ k} hit_j / log2(j + 1)`` over its ideal ``Σ_{j ≤ min(k, R)}``."""
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    k = _check_k(k, h)
    gains = 1.0 / np.log2(np.arange(2, k + 2))  # (k,)
    dcg = (h[:, :k] * gains[None, :]).sum(axis=1)
    ideal = np.concatenate([[0.0], np.cumsum(gains)])[np.minimum(r, k)]
    per = dcg / np.where(ideal > 0, ideal, 1.0)
    return _reduce(per, r, reduction)


def evaluate_retrieval(
    index: EmbeddingIndex,
    queries: Tensor | np.ndarray,
    query_labels: Tensor | np.ndarray,
    *,
    ks: tuple[int, ...] = (1, 5, 10),
    query_ids: Tensor | np.ndarray | None = None,
    r_metrics: bool = True,
    batch_size: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Search a labelled index with labelled queries and compute every retrieval metric.

    Queries whose id is in the corpus (``query_ids``) are excluded from their own results, and are not
    counted among their own relevant items. The search depth is ``max(ks)``, or ``max R`` when larger and
    ``r_metrics`` (MAP@R and R-precision need the top ``R``); queries are processed in batches so memory
    stays ``O(batch × depth)``.

    Shape:
        queries: ``(Q, D)``; query_labels, query_ids: ``(Q,)``.

    Args:
        index: an index with labels.
        queries: query vectors.
        query_labels: integer labels of the queries.
        ks: cut-offs for recall@k, recall_fraction@k and ndcg@k.
        query_ids: ids of the queries in the corpus (absent ids are fine: nothing is excluded for them).
        r_metrics: compute MAP@R and R-precision.
        batch_size: queries per batch; default ``max(1, 2^22 // depth)``.
        progress: show a progress bar.

    Returns:
        ``{"recall@k", "recall_fraction@k", "ndcg@k" for each k, "precision@1", "mrr@K" (K = max ks),
        "map@r", "r_precision", "num_queries", "num_lone_queries", "depth"}``; averages skip lone queries.

    Raises:
        ValueError: the index has no labels, or invalid arguments.
    """
    if index.labels is None:
        raise ValueError("index has no labels; build it with labels to evaluate retrieval")
    if isinstance(ks, int) or not ks:
        raise ValueError(f"ks must be a non-empty tuple of positive integers, got {ks!r}")
    ks = tuple(sorted({_positive_int("ks", k) for k in ks}))
    q_np = queries.detach().cpu().numpy() if isinstance(queries, Tensor) else queries
    if not isinstance(q_np, np.ndarray) or q_np.ndim != 2:
        raise ValueError(f"queries must have shape (Q, D), got {getattr(q_np, 'shape', type(q_np).__name__)}")
    nq = q_np.shape[0]
    ql = _int_vector("query_labels", query_labels, nq)
    qid = None if query_ids is None else _int_vector("query_ids", query_ids, nq)

    corpus_labels = index.labels
    uniq, counts = np.unique(corpus_labels, return_counts=True)
    pos = np.searchsorted(uniq, ql).clip(0, max(len(uniq) - 1, 0))
    n_rel = np.where(uniq[pos] == ql, counts[pos], 0).astype(np.int64)
    if qid is not None:
        order = np.argsort(index.ids, kind="stable")
        sorted_ids = index.ids[order]
        p = np.searchsorted(sorted_ids, qid).clip(0, len(sorted_ids) - 1)
        in_corpus = sorted_ids[p] == qid
        same = in_corpus & (corpus_labels[order[p]] == ql)
        n_rel = n_rel - same.astype(np.int64)
    limit = index.ntotal - (1 if qid is not None else 0)
    kmax = ks[-1]
    if kmax > limit:
        raise ValueError(f"ks: the largest k = {kmax} exceeds the {limit} items that can be retrieved")
    depth = max(kmax, int(n_rel.max(initial=0))) if r_metrics else kmax
    depth = min(depth, limit)
    bs = _positive_int("batch_size", batch_size) if batch_size is not None else max(1, (1 << 22) // depth)

    per: dict[str, list[np.ndarray]] = {}

    def put(name: str, values: float | np.ndarray) -> None:
        per.setdefault(name, []).append(np.asarray(values))

    bar = _progress(progress, "evaluating", nq)
    for s in range(0, nq, bs):
        e = min(s + bs, nq)
        res = index.search(q_np[s:e], depth, exclude_ids=None if qid is None else qid[s:e])
        assert res.labels is not None
        h = res.labels == ql[s:e, None]
        r = n_rel[s:e]
        for k in ks:
            put(f"recall@{k}", recall_at_k(h, r, k, reduction="none"))
            put(f"recall_fraction@{k}", recall_at_k(h, r, k, mode="fraction", reduction="none"))
            put(f"ndcg@{k}", ndcg_at_k(h, r, k, reduction="none"))
        put("precision@1", precision_at_1(h, r, reduction="none"))
        put(f"mrr@{kmax}", mrr(h[:, :kmax], r, reduction="none"))
        if r_metrics:
            put("map@r", map_at_r(h, r, reduction="none"))
            put("r_precision", r_precision(h, r, reduction="none"))
        bar.advance(e - s)
    bar.close()
    out: dict[str, float] = {}
    for name, parts in per.items():
        v = np.concatenate(parts)
        out[name] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
    out["num_queries"] = float(nq)
    out["num_lone_queries"] = float((n_rel == 0).sum())
    out["depth"] = float(depth)
    return out
