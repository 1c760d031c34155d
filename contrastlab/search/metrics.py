"""Binary retrieval metrics on hit matrices, each computed by :func:`contrastlab.search.graded.graded_metrics`.

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

A hit matrix is a run of ``K`` documents per query, the hits judged grade 1 and ``R`` minus the hits
unretrieved relevant documents besides: each function is trec_eval's measure on that run (``success.k``,
``recall.k``, ``P.1``, ``Rprec``, ``map_at_r``, ``map_cut.K``, ``recip_rank``, ``ndcg_cut.k``).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from contrastlab._checks import check_choice
from contrastlab.search.graded import Judgements, graded_metrics
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


def _graded(h: np.ndarray, r: np.ndarray, measures: list[str]) -> dict[str, np.ndarray]:
    """trec_eval's ``measures`` of the run whose column ``j`` is document ``j``: hits grade 1, ``R − hits`` unretrieved."""
    q, k = h.shape
    missing = np.maximum(r - h.sum(axis=1), 0)
    rows, cols = np.nonzero(h)
    extra_rows = np.repeat(np.arange(q), missing)
    extra_cols = k + np.arange(extra_rows.size) - np.repeat(np.cumsum(missing) - missing, missing)
    order = np.lexsort((np.concatenate([cols, extra_cols]), np.concatenate([rows, extra_rows])))
    docs = np.concatenate([cols, extra_cols])[order]
    indptr = np.concatenate([[0], np.cumsum(h.sum(axis=1) + missing)])
    judged = Judgements(indptr, docs, np.ones(docs.size, dtype=np.int64), k + int(missing.max(initial=0)))
    return graded_metrics(np.broadcast_to(np.arange(k), (q, k)), judged, measures)


def _measure(h: np.ndarray, r: np.ndarray, measure: str, reduction: str) -> float | np.ndarray:
    """One measure of :func:`_graded`, lone queries left out (``reduction``)."""
    return _reduce(next(iter(_graded(h, r, [measure]).values())), r, reduction)


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
    return _measure(h, r, f"{'success' if mode == 'any' else 'recall'}.{k}", reduction)


def precision_at_1(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Precision@1 (PML ``precision_at_1``): is the top retrieved item relevant."""
    h = _hits(hits)
    return _measure(h, _nrel(n_relevant, h.shape[0]), "P.1", reduction)


def r_precision(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """R-precision (PML ``r_precision``): relevant items among the top ``R``, divided by ``R``.

    Raises:
        ValueError: ``hits`` has fewer than ``max R`` columns.
    """
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    _check_depth_r(h, r, "r_precision")
    return _measure(h, r, "Rprec", reduction)


def map_at_r(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """MAP@R (PML ``mean_average_precision_at_r``): ``(1/R) Σ_{j ≤ R} hit_j · precision@j``.

    Raises:
        ValueError: ``hits`` has fewer than ``max R`` columns.
    """
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    _check_depth_r(h, r, "map@r")
    return _measure(h, r, "map_at_r", reduction)


def average_precision(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Average precision over the retrieved depth ``K``: ``(1/R) Σ_{j ≤ K} hit_j · precision@j``.

    Equals scikit-learn's ``average_precision_score`` when ``K = N`` (the full ranking).
    """
    h = _hits(hits)
    return _measure(h, _nrel(n_relevant, h.shape[0]), f"map_cut.{max(h.shape[1], 1)}", reduction)


def mrr(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Mean reciprocal rank within the retrieved depth (PML ``mean_reciprocal_rank`` with the same ``k``)."""
    h = _hits(hits)
    return _measure(h, _nrel(n_relevant, h.shape[0]), "recip_rank", reduction)


def ndcg_at_k(hits: object, n_relevant: object, k: int, *, reduction: str = "mean") -> float | np.ndarray:
    """NDCG@k, binary relevance: ``Σ_{j ≤ k} hit_j / log2(j + 1)`` over its ideal ``Σ_{j ≤ min(k, R)}``."""
    h = _hits(hits)
    r = _nrel(n_relevant, h.shape[0])
    return _measure(h, r, f"ndcg_cut.{_check_k(k, h)}", reduction)


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

    measures = {f"success.{k}": f"recall@{k}" for k in ks}  # trec_eval's measure → the name returned
    measures.update({f"recall.{k}": f"recall_fraction@{k}" for k in ks})
    measures.update({f"ndcg_cut.{k}": f"ndcg@{k}" for k in ks})
    measures.update({"P.1": "precision@1", f"mrr_cut.{kmax}": f"mrr@{kmax}"})
    if r_metrics:
        measures.update({"map_at_r": "map@r", "Rprec": "r_precision"})
    per: dict[str, list[np.ndarray]] = {name: [] for name in measures.values()}
    bar = _progress(progress, "evaluating", nq)
    for s in range(0, nq, bs):
        e = min(s + bs, nq)
        res = index.search(q_np[s:e], depth, exclude_ids=None if qid is None else qid[s:e])
        assert res.labels is not None
        r = n_rel[s:e]
        values = _graded(res.labels == ql[s:e, None], r, list(measures))
        for measure, name in measures.items():
            per[name].append(np.asarray(_reduce(values[measure.replace(".", "_")], r, "none")))
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
