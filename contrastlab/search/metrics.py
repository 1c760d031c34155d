"""Binary retrieval metrics on hit matrices by their familiar names, each one measure of graded's.

Each calls :func:`contrastlab.search.graded.hit_measure` (hit matrices, lone queries and the definitions are there).

Every metric takes ``hits`` ``(Q, K)`` bool (rank order, the query itself already excluded) and
``n_relevant`` ``(Q,)``; ``reduction="none"`` returns ``(Q,)``, NaN for lone queries.
"""

from __future__ import annotations

import numpy as np

from contrastlab._checks import check_choice
from contrastlab.search.evaluate import evaluate_retrieval
from contrastlab.search.graded import hit_measure, hits_from_labels

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


def recall_at_k(
    hits: object, n_relevant: object, k: int, *, mode: str = "any", reduction: str = "mean"
) -> float | np.ndarray:
    """Recall@k: ``mode="any"`` — a relevant item in the top ``k``; ``"fraction"`` — share of ``R`` retrieved.

    ``"any"`` is ``success.k`` (PML's ``precision_at_1`` for ``k = 1``, the WEINCE "R@k"); ``"fraction"`` is
    ``recall.k``.
    """
    check_choice("mode", mode, ("any", "fraction"))
    return hit_measure(hits, n_relevant, "success" if mode == "any" else "recall", k, reduction=reduction)


def precision_at_1(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Precision@1 (PML ``precision_at_1``, trec_eval ``P.1``): is the top retrieved item relevant."""
    return hit_measure(hits, n_relevant, "P.1", reduction=reduction)


def r_precision(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """R-precision (PML ``r_precision``, trec_eval ``Rprec``): relevant items among the top ``R``, over ``R``."""
    return hit_measure(hits, n_relevant, "Rprec", reduction=reduction)


def map_at_r(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """MAP@R (PML ``mean_average_precision_at_r``): ``(1/R) Σ_{j ≤ R} hit_j · precision@j``.

    Musgrave et al. 2020, "A metric learning reality check", arXiv:2003.08505.
    """
    return hit_measure(hits, n_relevant, "map_at_r", reduction=reduction)


def average_precision(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Average precision over the retrieved depth ``K`` (``map_cut.K``): ``(1/R) Σ_{j ≤ K} hit_j · precision@j``.

    Equals scikit-learn's ``average_precision_score`` when ``K = N`` (the full ranking).
    """
    return hit_measure(hits, n_relevant, "map_cut", reduction=reduction)


def mrr(hits: object, n_relevant: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Mean reciprocal rank within the retrieved depth (``recip_rank``; PML ``mean_reciprocal_rank``)."""
    return hit_measure(hits, n_relevant, "recip_rank", reduction=reduction)


def ndcg_at_k(hits: object, n_relevant: object, k: int, *, reduction: str = "mean") -> float | np.ndarray:
    """NDCG@k, binary relevance: ``Σ_{j ≤ k} hit_j / log2(j + 1)`` over its ideal ``Σ_{j ≤ min(k, R)}``.

    trec_eval's ``ndcg_cut.k``; scikit-learn's ``ndcg_score`` with ``k``.
    """
    return hit_measure(hits, n_relevant, "ndcg_cut", k, reduction=reduction)
