"""Graded retrieval metrics equal to trec_eval's, over ranked lists that hold unjudged documents.

The measures are trec_eval's (version 9, as ``pytrec_eval`` runs it), named by its own strings, for one
query with judgements ``grade(d)`` (an integer; unjudged documents count as 0), ``R`` the number of judged
documents with grade ≥ 1, and the run's documents at ranks ``i = 1 … n``:

- ``ndcg_cut.k``: ``DCG@k / IDCG@k``, ``DCG@k = Σ_{i ≤ k} max(grade_i, 0) / log2(i + 1)``, the ideal DCG of
  the judged grades sorted in decreasing order (Järvelin & Kekäläinen 2002); 0 when ``R = 0``.
- ``map_cut.k``: ``(1/R) Σ_{i ≤ k, grade_i ≥ 1} P@i``; 0 when ``R = 0``.
- ``recall.k``: relevant documents in the top ``k`` over ``R``; 0 when ``R = 0``.
- ``P.k``: relevant documents in the top ``k`` over ``k`` (also when fewer than ``k`` were retrieved).
- ``success.k``: 1 if a relevant document is in the top ``k``, else 0 (the "R@k" of one-positive retrieval).
- ``Rprec``: relevant documents in the top ``R`` over ``R``; 0 when ``R = 0``.
- ``recip_rank``: ``1 / rank`` of the first relevant document, 0 if none is retrieved.
- ``mrr_cut.k`` (not a trec_eval name; MTEB's ``mrr_at_k``): ``recip_rank`` of the top ``k`` alone.
- ``map_at_r`` (not a trec_eval name; MAP@R of Musgrave et al. 2020, arXiv:2003.08505):
  ``(1/R) Σ_{i ≤ R, grade_i ≥ 1} P@i``; 0 when ``R = 0``.

**Order of equal scores.** trec_eval does not trust the run's order: it sorts each query's documents by
score, decreasing, and equal scores by document id in *decreasing* ``strcmp`` order (its
``comp_sim_docno``). :func:`rank_run` does the same (Python's string order is UTF-8's byte order), so a
run whose float scores tie is scored exactly as trec_eval scores it.

Everything is vectorised over queries: a run is an ``(Q, K)`` array of document positions (−1 where a
query has fewer than ``K`` results) with its scores, and the judgements a :class:`Judgements` (CSR over
queries). :func:`evaluate_run` takes and returns pytrec_eval's dictionaries, through the same arrays.

**Hit matrices.** A boolean ``hits[q, j]`` (is the ``j``-th retrieved item relevant to query ``q``; rank
order) with ``n_relevant[q] = R`` stands for the run of ``K`` documents per query whose hits are judged grade 1,
with ``R`` minus the hits unretrieved relevant documents besides: :func:`hit_metrics` and :func:`hit_measure`
score it by :func:`graded_metrics`. Queries with ``R = 0`` ("lone" queries) are left out of every average, as
pytorch-metric-learning does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from contrastlab._checks import check_choice
from contrastlab.search.index import _int_vector, _positive_int

__all__ = [
    "Judgements",
    "judgements",
    "tie_keys",
    "rank_run",
    "graded_metrics",
    "evaluate_run",
    "parse_measure",
    "MTEB_NAMES",
    "mteb_name",
    "hits_from_labels",
    "hit_metrics",
    "hit_measure",
]

_MEASURE = re.compile(r"^(ndcg_cut|map_cut|recall|P|mrr_cut|success)\.([1-9][0-9]*)$|^(recip_rank|Rprec|map_at_r)$")

MTEB_NAMES = {
    "ndcg_cut": "ndcg_at",
    "map_cut": "map_at",
    "recall": "recall_at",
    "P": "precision_at",
    "mrr_cut": "mrr_at",
}
"""trec_eval's measure → MTEB's results-JSON prefix (``ndcg_cut.10`` → ``ndcg_at_10``)."""


def parse_measure(measure: str) -> tuple[str, int | None]:
    """``"ndcg_cut.10"`` → ``("ndcg_cut", 10)``; ``"recip_rank"`` → ``("recip_rank", None)``.

    Raises:
        ValueError: not one of ``ndcg_cut.k``, ``map_cut.k``, ``recall.k``, ``P.k``, ``mrr_cut.k``, ``success.k``,
            ``recip_rank``, ``Rprec``, ``map_at_r``.
    """
    m = _MEASURE.match(measure) if isinstance(measure, str) else None
    if m is None:
        raise ValueError(
            f"measures: unknown measure {measure!r}; known: ndcg_cut.k, map_cut.k, recall.k, P.k, mrr_cut.k, "
            "success.k (k a positive integer), recip_rank, Rprec and map_at_r"
        )
    if m.group(3):
        return m.group(3), None
    return m.group(1), int(m.group(2))


def mteb_name(measure: str) -> str:
    """MTEB's results-JSON key of a measure: ``ndcg_cut.10`` → ``ndcg_at_10``, ``recip_rank`` → ``mrr``.

    Raises:
        ValueError: a measure MTEB does not report (``success.k``, ``Rprec``, ``map_at_r``).
    """
    kind, k = parse_measure(measure)
    if kind == "recip_rank":
        return "mrr"
    if kind not in MTEB_NAMES:
        raise ValueError(f"measures: MTEB reports no {measure!r}")
    return f"{MTEB_NAMES[kind]}_{k}"


@dataclass(frozen=True)
class Judgements:
    """Graded judgements of ``Q`` queries over ``M`` documents, compressed by query (CSR).

    Attributes:
        indptr: ``(Q + 1,)`` query ``q``'s judgements are entries ``indptr[q] : indptr[q + 1]``.
        doc: ``(J,)`` document positions in ``[0, M)``, increasing within a query.
        grade: ``(J,)`` int64 grades (≤ 0: judged non-relevant).
        num_documents: ``M``.
    """

    indptr: np.ndarray
    doc: np.ndarray
    grade: np.ndarray
    num_documents: int

    @property
    def num_queries(self) -> int:
        """``Q``."""
        return int(self.indptr.size - 1)

    def num_relevant(self) -> np.ndarray:
        """``(Q,)`` judged documents with grade ≥ 1 per query (trec_eval's ``num_rel``)."""
        relevant_before = np.concatenate([[0], np.cumsum(self.grade >= 1)]).astype(np.int64)
        return relevant_before[self.indptr[1:]] - relevant_before[self.indptr[:-1]]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """``(Q, K)`` grade of each retrieved document position (0 where unjudged or ``ids == −1``).

        With few judgements per query (at most 16) each retrieved id is compared with the query's judged ids
        directly; otherwise it is found by a binary search among every (query, document) key.
        """
        counts = np.diff(self.indptr)
        width = int(counts.max()) if counts.size else 0
        if 0 < width <= 16:
            judged = np.full((self.num_queries, width), -2, dtype=np.int64)  # -2 matches no id (empty is -1)
            grades = np.zeros((self.num_queries, width), dtype=np.int64)
            rows = np.repeat(np.arange(self.num_queries), counts)
            cols = np.arange(self.doc.size) - self.indptr[rows]
            judged[rows, cols] = self.doc
            grades[rows, cols] = self.grade
            out = np.zeros(ids.shape, dtype=np.int64)
            for c in range(width):  # a document is judged at most once per query: the matches are disjoint
                out += np.where(ids == judged[:, c : c + 1], grades[:, c : c + 1], 0)
            return out
        q_of = np.repeat(np.arange(self.num_queries, dtype=np.int64), counts)
        keys = q_of * self.num_documents + self.doc  # increasing: queries in order, documents sorted within
        wanted = np.arange(ids.shape[0], dtype=np.int64)[:, None] * self.num_documents + ids
        pos = np.minimum(np.searchsorted(keys, wanted), max(keys.size - 1, 0))
        found = (ids >= 0) & (keys[pos] == wanted) if keys.size else np.zeros(ids.shape, dtype=bool)
        return np.where(found, self.grade[pos] if keys.size else 0, 0)

    def ideal(self, depth: int) -> np.ndarray:
        """``(Q, depth)`` each query's positive grades sorted decreasing, zero-padded: the ideal ranking's gains."""
        out = np.zeros((self.num_queries, depth), dtype=np.float64)
        q_of = np.repeat(np.arange(self.num_queries, dtype=np.int64), np.diff(self.indptr))
        gain = np.maximum(self.grade, 0)
        order = np.lexsort((-gain, q_of))
        rank = np.arange(order.size) - self.indptr[q_of[order]]
        keep = rank < depth
        out[q_of[order][keep], rank[keep]] = gain[order][keep]
        return out


def judgements(qrels: Mapping[str, Mapping[str, int]], query_ids: Sequence[str], doc_ids: Sequence[str]) -> Judgements:
    """The judgements of ``query_ids`` (in that order) as arrays over the positions of ``doc_ids``.

    Judged documents missing from ``doc_ids`` are kept out of the arrays but still count in ``R`` only if
    they are in ``doc_ids``: pass every document of the corpus.

    Raises:
        ValueError: a query of ``query_ids`` without judgements, a judged document not in ``doc_ids``, or a
            non-integer grade.
    """
    pos = {d: i for i, d in enumerate(doc_ids)}
    indptr = [0]
    docs: list[int] = []
    grades: list[int] = []
    for q in query_ids:
        if q not in qrels:
            raise ValueError(f"qrels: query {q!r} has no judgements")
        row = []
        for d, g in qrels[q].items():
            if d not in pos:
                raise ValueError(f"qrels: query {q!r} judges document {d!r}, which is not in the corpus")
            if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
                raise ValueError(f"qrels: grade of ({q!r}, {d!r}) must be an int, got {g!r}")
            row.append((pos[d], int(g)))
        row.sort()
        docs.extend(r[0] for r in row)
        grades.extend(r[1] for r in row)
        indptr.append(len(docs))
    return Judgements(
        indptr=np.asarray(indptr, dtype=np.int64),
        doc=np.asarray(docs, dtype=np.int64),
        grade=np.asarray(grades, dtype=np.int64),
        num_documents=len(doc_ids),
    )


def tie_keys(doc_ids: Sequence[str]) -> np.ndarray:
    """``(M,)`` int64: sorting by it ascending orders documents by id *decreasing*, as trec_eval breaks ties."""
    order = sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)
    keys = np.empty(len(doc_ids), dtype=np.int64)
    keys[np.asarray(order, dtype=np.int64)] = np.arange(len(doc_ids), dtype=np.int64)
    return keys


def rank_run(ids: np.ndarray, scores: np.ndarray, ties: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query's results in trec_eval's order: score decreasing, equal scores by document id decreasing.

    Args:
        ids: ``(Q, K)`` document positions, −1 for an empty slot (sorted last).
        scores: ``(Q, K)`` their scores (float; an empty slot's score is ignored).
        ties: ``(M,)`` :func:`tie_keys` of the corpus.

    Returns:
        ``(ids, scores)`` reordered, ``(Q, K)`` each.
    """
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    if ids.shape != scores.shape or ids.ndim != 2:
        raise ValueError(f"ids and scores must have the same (Q, K) shape, got {ids.shape} and {scores.shape}")
    if ((ids < -1) | (ids >= ties.size)).any():
        raise ValueError(f"ids must be document positions in [0, {ties.size}) or -1")
    empty = ids < 0
    neg = np.where(empty, np.inf, -scores)
    if np.isnan(neg).any():
        raise ValueError("scores must not be NaN")
    if neg.shape[1] < 2:
        return ids, scores
    # by score first (a search's output is already in that order: then no sort) ...
    if not (neg[:, 1:] >= neg[:, :-1]).all():
        first = np.argsort(neg, axis=1, kind="stable")
        ids, scores, neg = (np.take_along_axis(x, first, 1) for x in (ids, scores, neg))
    # ... then each run of equal scores by the tie key, touching only the tied entries
    equal = neg[:, 1:] == neg[:, :-1]  # (Q, K − 1): entry j + 1 ties with entry j
    if not equal.any():
        return ids, scores
    tied = np.zeros(neg.shape, dtype=bool)
    tied[:, 1:] |= equal
    tied[:, :-1] |= equal
    rows, cols = np.nonzero(tied)  # row-major: each run of equal scores is contiguous here
    starts = np.ones(rows.size, dtype=np.int64)
    starts[1:] = ~((rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1] + 1) & equal[rows[1:], cols[1:] - 1])
    run_of = np.cumsum(starts)  # which run each tied entry belongs to, increasing
    tied_ids = ids[rows, cols]
    key = np.where(tied_ids < 0, ties.size, ties[np.maximum(tied_ids, 0)])
    order = np.argsort(run_of * (ties.size + 1) + key, kind="stable")
    ids = ids.copy()
    ids[rows, cols] = tied_ids[order]  # equal scores: only the ids move
    return ids, scores


def graded_metrics(
    ids: np.ndarray,
    judged: Judgements,
    measures: Sequence[str],
    *,
    scores: np.ndarray | None = None,
    ties: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per-query trec_eval measures of a run.

    Args:
        ids: ``(Q, K)`` retrieved document positions, rank order (or any order, with ``scores`` and ``ties``),
            −1 for an empty slot; row ``q`` is query ``q`` of ``judged``.
        judged: the judgements (:func:`judgements`).
        measures: trec_eval names (:func:`parse_measure`), e.g. ``["ndcg_cut.10", "map_cut.100", "recall.100"]``.
        scores: ``(Q, K)`` scores: with ``ties``, the run is first put in trec_eval's order (:func:`rank_run`).
        ties: ``(M,)`` :func:`tie_keys` of the corpus.

    Returns:
        trec_eval's output key (``ndcg_cut_10``, ``recip_rank``, …) → ``(Q,)`` float64.

    Raises:
        ValueError: an unknown measure, ``ids`` not ``(Q, K)`` with ``Q`` the judged queries, or only one of
            ``scores`` and ``ties``.
    """
    parsed = [parse_measure(m) for m in measures]
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] != judged.num_queries:
        raise ValueError(f"ids must have shape (Q = {judged.num_queries}, K), got {ids.shape}")
    if (scores is None) != (ties is None):
        raise ValueError("scores and ties come together (the run is then sorted as trec_eval sorts it)")
    if scores is not None and ties is not None:
        ids, _ = rank_run(ids, scores, ties)
    q, n = ids.shape
    grade = judged.lookup(ids).astype(np.float64)  # (Q, K)
    rel = grade >= 1
    n_rel = judged.num_relevant().astype(np.float64)
    has_rel = n_rel > 0
    safe_rel = np.where(has_rel, n_rel, 1.0)
    n_rel_int = judged.num_relevant()
    by_r = any(kind in ("Rprec", "map_at_r") for kind, _ in parsed)
    depth = max([k for _, k in parsed if k is not None] + [1, int(n_rel_int.max(initial=0)) if by_r else 1])
    cols = min(depth, n)
    hits = np.cumsum(rel[:, :cols], axis=1)  # (Q, cols) relevant within the top i
    rank = np.arange(1, cols + 1, dtype=np.float64)
    out: dict[str, np.ndarray] = {}
    dcg = idcg = None
    for kind, k in parsed:
        name = kind if k is None else f"{kind}_{k}"
        c = None if k is None else min(k, n)  # a cut-off beyond the run: everything retrieved
        if kind == "ndcg_cut":
            assert k is not None and c is not None
            if dcg is None:
                disc = 1.0 / np.log2(np.arange(2, depth + 2, dtype=np.float64))
                dcg = np.cumsum(np.maximum(grade[:, :cols], 0) * disc[:cols], axis=1)
                idcg = np.cumsum(judged.ideal(depth) * disc, axis=1)
            assert idcg is not None
            top = dcg[:, c - 1] if c > 0 else np.zeros(q)
            ideal = idcg[:, k - 1]
            out[name] = np.where(ideal > 0, top / np.where(ideal > 0, ideal, 1.0), 0.0)
        elif kind == "map_cut":
            assert c is not None
            prec = np.where(rel[:, :c], hits[:, :c] / rank[:c], 0.0)
            out[name] = np.where(has_rel, prec.sum(axis=1) / safe_rel, 0.0)
        elif kind == "recall":
            assert c is not None
            found = hits[:, c - 1] if c > 0 else np.zeros(q)
            out[name] = np.where(has_rel, found / safe_rel, 0.0)
        elif kind == "P":
            assert k is not None and c is not None
            out[name] = (hits[:, c - 1] if c > 0 else np.zeros(q)) / k
        elif kind == "success":
            assert c is not None
            out[name] = (hits[:, c - 1] > 0).astype(np.float64) if c > 0 else np.zeros(q)
        elif kind in ("Rprec", "map_at_r"):
            within = rel[:, :cols] & (rank[None, :] <= n_rel[:, None])  # relevant and ranked within the top R
            if kind == "Rprec":
                found = within.sum(axis=1).astype(np.float64)
            else:
                found = np.where(within, hits / rank, 0.0).sum(axis=1)
            out[name] = np.where(has_rel, found / safe_rel, 0.0)
        else:  # recip_rank over the whole run, or mrr_cut over its top k
            limit = n if k is None else min(k, n)
            first = np.argmax(rel[:, :limit], axis=1) if limit > 0 else np.zeros(q, dtype=np.int64)
            any_rel = rel[:, :limit].any(axis=1) if limit > 0 else np.zeros(q, dtype=bool)
            out[name] = np.where(any_rel, 1.0 / (first + 1.0), 0.0)
    return out


def evaluate_run(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], measures: Sequence[str]
) -> dict[str, dict[str, float]]:
    """pytrec_eval's ``RelevanceEvaluator(qrels, measures).evaluate(run)``, computed by :func:`graded_metrics`.

    Queries of ``run`` without judgements are left out, as trec_eval leaves them out; a judged query absent
    from ``run`` is absent from the output too. Documents of the run that no query judges are unjudged.

    Returns:
        query id → trec_eval output key → value.
    """
    queries = [q for q in run if q in qrels]
    doc_ids = sorted({d for q in queries for d in qrels[q]} | {d for q in queries for d in run[q]})
    pos = {d: i for i, d in enumerate(doc_ids)}
    width = max((len(run[q]) for q in queries), default=0)
    ids = np.full((len(queries), width), -1, dtype=np.int64)
    scores = np.zeros((len(queries), width), dtype=np.float64)
    for i, q in enumerate(queries):
        row = run[q]
        ids[i, : len(row)] = [pos[d] for d in row]
        scores[i, : len(row)] = [float(s) for s in row.values()]
        if not all(math.isfinite(s) for s in scores[i, : len(row)]):
            raise ValueError(f"run: query {q!r} has a score that is not finite")
    judged = judgements(qrels, queries, doc_ids)
    per = graded_metrics(ids, judged, measures, scores=scores, ties=tie_keys(doc_ids))
    return {q: {name: float(v[i]) for name, v in per.items()} for i, q in enumerate(queries)}


def hits_from_labels(retrieved_labels: object, query_labels: object) -> np.ndarray:
    """``hits[q, j] = retrieved_labels[q, j] == query_labels[q]``.

    Shape:
        retrieved_labels: ``(Q, K)``; query_labels: ``(Q,)``. Returns ``(Q, K)`` bool.
    """
    r = _numpy(retrieved_labels)
    if r.ndim != 2:
        raise ValueError(f"retrieved_labels must have shape (Q, K), got {r.shape}")
    ql = _int_vector("query_labels", query_labels, r.shape[0])
    return r == ql[:, None]


def _numpy(x: object) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def _hit_inputs(hits: object, n_relevant: object) -> tuple[np.ndarray, np.ndarray]:
    """``(Q, K)`` bool hits and ``(Q,)`` int64 ``n_relevant``, checked."""
    h = _numpy(hits)
    if h.ndim != 2:
        raise ValueError(f"hits must have shape (Q, K), got {h.shape}")
    if h.dtype != np.bool_:
        if h.dtype.kind not in "iu" or not np.isin(h, (0, 1)).all():
            raise TypeError(f"hits must be boolean (or 0/1 integers), got dtype {h.dtype}")
        h = h.astype(bool)
    r = _int_vector("n_relevant", n_relevant, h.shape[0])
    if (r < 0).any():
        raise ValueError("n_relevant must be >= 0")
    return h, r


def _hit_run_metrics(h: np.ndarray, r: np.ndarray, measures: Sequence[str]) -> dict[str, np.ndarray]:
    """:func:`graded_metrics` of the run whose column ``j`` is document ``j``: NaN for lone queries."""
    q, k = h.shape
    missing = np.maximum(r - h.sum(axis=1), 0)
    rows, cols = np.nonzero(h)
    extra_rows = np.repeat(np.arange(q), missing)
    extra_cols = k + np.arange(extra_rows.size) - np.repeat(np.cumsum(missing) - missing, missing)
    order = np.lexsort((np.concatenate([cols, extra_cols]), np.concatenate([rows, extra_rows])))
    docs = np.concatenate([cols, extra_cols])[order]
    indptr = np.concatenate([[0], np.cumsum(h.sum(axis=1) + missing)])
    judged = Judgements(indptr, docs, np.ones(docs.size, dtype=np.int64), k + int(missing.max(initial=0)))
    per = graded_metrics(np.broadcast_to(np.arange(k), (q, k)), judged, measures)
    return {name: np.where(r > 0, v, np.nan) for name, v in per.items()}


def hit_metrics(hits: object, n_relevant: object, measures: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-query trec_eval ``measures`` of the run a hit matrix stands for (module docstring, *Hit matrices*).

    Shape:
        hits: ``(Q, K)`` bool (or 0/1 integers); n_relevant: ``(Q,)`` integers ``>= 0``.

    Returns:
        trec_eval's output key (``success_5``, ``Rprec``, …) → ``(Q,)`` float64, NaN for a lone query.
    """
    return _hit_run_metrics(*_hit_inputs(hits, n_relevant), measures)


_BY_R = {"Rprec": "r_precision", "map_at_r": "map@r"}
"""Measures that need the top ``R`` retrieved → the metric's name in the error that says so."""


def hit_measure(
    hits: object, n_relevant: object, measure: str, k: int | None = None, *, reduction: str = "mean"
) -> float | np.ndarray:
    """One trec_eval measure of a hit matrix's run, averaged over the queries that are not lone.

    Args:
        hits: ``(Q, K)`` bool (or 0/1 integers), rank order.
        n_relevant: ``(Q,)`` relevant items in the corpus per query.
        measure: a trec_eval measure kind (:func:`parse_measure`): with ``k`` its cut-off (``"success"``,
            ``"recall"``, ``"ndcg_cut"``, ``"P"``), ``"map_cut"`` without ``k`` taken at the depth ``K``, or a
            measure without cut-off (``"recip_rank"``, ``"Rprec"``, ``"map_at_r"``).
        k: the cut-off, a positive integer at most ``K``.
        reduction: ``"mean"`` (NaN if every query is lone) or ``"none"``: ``(Q,)``, NaN for lone queries.

    Raises:
        ValueError: ``k`` is not in ``[1, K]``, or ``Rprec`` / ``map_at_r`` with fewer than ``max R`` columns.
    """
    h, r = _hit_inputs(hits, n_relevant)
    if k is not None:
        k = _positive_int("k", k)
        if k > h.shape[1]:
            raise ValueError(f"k = {k} exceeds the {h.shape[1]} retrieved columns of hits")
        measure = f"{measure}.{k}"
    elif measure == "map_cut":
        measure = f"map_cut.{max(h.shape[1], 1)}"
    need = int(r.max(initial=0))
    if measure in _BY_R and need > h.shape[1]:
        raise ValueError(
            f"hits has K = {h.shape[1]} columns but {_BY_R[measure]} needs the top R = {need} (the largest n_relevant)"
        )
    per_query = next(iter(_hit_run_metrics(h, r, [measure]).values()))
    check_choice("reduction", reduction, ("mean", "none"))
    if reduction == "none":
        return per_query
    valid = r > 0
    return float(per_query[valid].mean()) if valid.any() else float("nan")
