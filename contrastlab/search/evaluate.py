"""Retrieval quality of a labelled index: every binary metric of :mod:`contrastlab.search.graded` for labelled queries.

An item is relevant to a query when their labels are equal; the runs are the index's exact search, batch by
batch, scored as hit matrices (:func:`contrastlab.search.graded.hit_metrics`).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from contrastlab.search.graded import hit_metrics
from contrastlab.search.index import EmbeddingIndex, _int_vector, _positive_int, _progress

__all__ = ["evaluate_retrieval"]


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
        values = hit_metrics(res.labels == ql[s:e, None], r, list(measures))
        for measure, name in measures.items():
            per[name].append(values[measure.replace(".", "_")])
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
