"""The audit's measurements on query and document embeddings, each built from the library's own functions.

Notation: queries ``q`` ``(Q, D)`` and documents ``d`` ``(M, D)`` as unit vectors (cosine), ``rel[i]``
the document of query i's pair. Memory is bounded by the embeddings themselves plus fixed-size blocks:
nothing of size Q × M is ever held (searches go through faiss, partitions through the streamed
softmax-search functions, tails through a seeded subsample).

* :func:`retrieval` — recall@k, nDCG@k, MRR and MAP@R per query (:mod:`contrastlab.search.graded`, named
  by :func:`pair_measures`) from an exact search (:class:`~contrastlab.search.sharded.ShardedSearch`)
  ranked as trec_eval ranks it, with Student-t intervals (:func:`contrastlab.eval.probe.mean_ci`).
* :func:`fit_temperature` — the τ minimising the held-out pair cross-entropy −log P_τ(rel | q) of the
  softmax search over the whole document set (Whiteley 2026, eq. 6). In β = 1/τ the objective
  log Σ_j e^{β s_j} − β s_rel is convex (a log-sum-exp of linear functions minus a linear one), so a
  bounded scalar search on log τ finds its minimum.
* :func:`risk_curve` — Whiteley's InfoNCE risk R(φ; k, τ) (eq. 14, :func:`contrastlab.theory.risk.tuple_loss`)
  on the audited pairs with k negatives drawn uniformly from the other documents, minus its k → ∞ limit
  log E_j e^{(s_j − s_rel)/τ} (the mean over every other document, from the streamed log-partition);
  Prop. 1 predicts the gap falls as O(1/k), i.e. log-log slope −1 (:func:`contrastlab.theory.slope.fit_slope`, as in the k-gap experiment).
* :func:`hard_negative_tails` — WEINCE's extreme-value view of query → document negatives: a GPD fit
  to the top 1% (:func:`contrastlab.eval.tails.pot_fit`) and WEINCE's per-anchor Weibull-vs-Gumbel AIC
  (:func:`contrastlab.losses.weince.anchor_tail_stats`).
* :func:`norm_diagnostics` — the pre-normalisation norm against word frequency (``wordfreq`` Zipf
  values), specificity (mean inverse document frequency of the text's words in the audit's queries) and
  length (Spearman with bootstrap intervals, :func:`contrastlab.eval.norms.norm_correlations`), and as
  a confidence for top-1 retrieval (AUROC, :func:`contrastlab.eval.calibration.auroc`) next to the
  softmax search's own top-1 probability.

The passes over the whole document set (the top-k of :func:`retrieval`, the softmax search's
log-partition, probabilities and entropy) take the documents either as a tensor or as a
:class:`~contrastlab.search.sharded.ShardedSearch`, whose shards may live in Ray actors; the sampled
diagnostics (risk curve negatives, tails, uniformity) read the document embeddings themselves.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import optimize
from torch import Tensor

from contrastlab._checks import check_int
from contrastlab.eval.calibration import auroc
from contrastlab.eval.norms import norm_correlations
from contrastlab.eval.probe import MeanCI, mean_ci
from contrastlab.eval.tails import TailReport, isotropic_xi, pot_fit
from contrastlab.losses import alignment, uniformity
from contrastlab.losses.weince import anchor_tail_stats
from contrastlab.search import log_partition, log_prob
from contrastlab.search.graded import Judgements, graded_metrics, rank_run
from contrastlab.search.sharded import ShardedSearch
from contrastlab.theory.risk import mc_estimate, tuple_loss
from contrastlab.theory.slope import fit_slope

__all__ = [
    "mrr_key",
    "pair_measures",
    "RetrievalResult",
    "retrieval",
    "held_out_cross_entropy",
    "fit_temperature",
    "risk_curve",
    "hard_negative_tails",
    "geometry",
    "norm_diagnostics",
    "word_statistics",
]


@dataclass(frozen=True)
class RetrievalResult:
    """Per-query retrieval results.

    Attributes:
        metrics: name → mean with its 95% t-interval over queries.
        correct_top1: ``(Q,)`` 0/1, the pair's document ranked first.
        top1_score: ``(Q,)`` the cosine of the first-ranked document.
        per_query: name → ``(Q,)`` the metric of each query (what ``metrics`` averages).
    """

    metrics: dict[str, MeanCI]
    correct_top1: np.ndarray
    top1_score: np.ndarray
    per_query: dict[str, np.ndarray]


def mrr_key(ks: tuple[int, ...]) -> str:
    """The name of the audit's MRR metric for the cut-offs ``ks``: ``mrr@K``, K the largest cut-off."""
    return f"mrr@{max(ks)}"


def pair_measures(ks: tuple[int, ...]) -> dict[str, str]:
    """trec_eval's measure → the audit's name on pairs: ``recall@k``, ``ndcg@k``, ``mrr@K`` and ``map@r``.

    With one relevant document per query ``recall@k`` is ``success.k`` (equal to ``recall.k``).
    """
    ks = tuple(sorted(set(ks)))
    names = {f"success.{k}": f"recall@{k}" for k in ks}
    names.update({f"ndcg_cut.{k}": f"ndcg@{k}" for k in ks})
    return {**names, f"mrr_cut.{ks[-1]}": mrr_key(ks), "map_at_r": "map@r"}


def _as_corpus(documents: Tensor | ShardedSearch) -> ShardedSearch:
    """Documents as a searchable corpus: a tensor becomes one in-process shard whose ids are its row positions."""
    if isinstance(documents, ShardedSearch):
        return documents
    return ShardedSearch.local([(np.arange(documents.shape[0]), documents)], metric="cosine")


def retrieval(
    queries: Tensor, documents: Tensor | ShardedSearch, rel: np.ndarray, ks: tuple[int, ...]
) -> RetrievalResult:
    """Exact cosine search of every query over every document; per-query metrics with intervals.

    The metric names come from ``ks`` alone — ``recall@k`` and ``ndcg@k`` for each k, ``mrr@K`` (K the
    largest; :func:`mrr_key`) and ``map@r`` — whatever the number of documents M: a cut-off k > M ranks
    every document, so it is the cut-off M (``recall@k`` is then 1, each query's document being among them).

    Equal scores are ranked as trec_eval ranks them, by document id decreasing
    (:func:`~contrastlab.search.graded.rank_run`; a document's id is its position: the later document first).

    Shape:
        queries: ``(Q, D)``; documents: ``(M, D)``, or a cosine corpus whose ids are the document positions;
        rel: ``(Q,)`` document positions.
    """
    corpus = _as_corpus(documents)
    ks = tuple(sorted(set(ks)))
    res = corpus.search(queries, min(ks[-1], corpus.ntotal))
    m, q = corpus.ntotal, len(rel)
    ids, scores = rank_run(res.ids, res.scores, np.arange(m)[::-1].copy())  # ties: the larger position first
    judged = Judgements(np.arange(q + 1), np.asarray(rel, dtype=np.int64), np.ones(q, dtype=np.int64), m)
    names = pair_measures(ks)
    graded = graded_metrics(ids, judged, list(names))
    per = {name: graded[measure.replace(".", "_")] for measure, name in names.items()}
    return RetrievalResult(
        metrics={name: mean_ci(v.tolist()) for name, v in per.items()},
        correct_top1=(ids[:, 0] == np.asarray(rel)).astype(np.float64),
        top1_score=scores[:, 0].astype(np.float64),
        per_query=per,
    )


def held_out_cross_entropy(
    queries: Tensor, documents: Tensor | ShardedSearch, rel: np.ndarray, temperature: float
) -> Tensor:
    """``−log P_τ(rel_i | q_i)`` per query under the softmax search over all documents, ``(Q,)`` float64.

    ``documents``: unit vectors ``(M, D)``, or a cosine corpus whose ids are the document positions.
    """
    if isinstance(documents, ShardedSearch):
        return -documents.log_prob(queries, np.asarray(rel), temperature=temperature)
    return -log_prob(queries, documents, torch.as_tensor(rel), temperature=temperature)


#: Points of the log-spaced τ grid on which :func:`fit_temperature` also evaluates the cross-entropy, for its figure.
TEMPERATURE_GRID = 25


def fit_temperature(
    queries: Tensor,
    documents: Tensor | ShardedSearch,
    rel: np.ndarray,
    *,
    tau_min: float,
    tau_max: float,
    weights: np.ndarray | None = None,
    grid: int = TEMPERATURE_GRID,
) -> tuple[float, list[tuple[float, float]]]:
    """The τ in ``[tau_min, tau_max]`` minimising the mean held-out cross-entropy (bounded Brent on log τ).

    ``weights`` ``(P,)``, non-negative and summing to 1, weigh the pairs (default: equal), e.g. ``1 / (Q·|R_q|)``
    so that each query of a task with several relevant documents counts once. A weighted sum of convex
    functions of β = 1/τ is convex, so the search still finds the minimum.

    After the search, the same mean is evaluated at ``grid`` log-spaced τ from ``tau_min`` to ``tau_max``, so
    the returned curve covers the whole range evenly (a figure of the search's points alone is a few points
    far apart and a cluster at τ*); the grid does not move τ*.

    Returns:
        ``(τ*, [(τ, mean cross-entropy), …])`` — the search's points and the grid's, sorted by τ.
    """
    check_int("grid", grid, 0)
    seen: dict[float, float] = {}
    w = None if weights is None else torch.as_tensor(np.asarray(weights, dtype=np.float64))

    def objective(log_tau: float) -> float:
        tau = math.exp(log_tau)
        ce = held_out_cross_entropy(queries, documents, rel, tau)
        value = float(ce.mean() if w is None else (ce * w).sum())
        seen[tau] = value
        return value

    res = optimize.minimize_scalar(
        objective, bounds=(math.log(tau_min), math.log(tau_max)), method="bounded", options={"xatol": 1e-3}
    )
    for log_tau in np.linspace(math.log(tau_min), math.log(tau_max), grid) if grid > 1 else ():
        objective(float(log_tau))
    return float(math.exp(res.x)), sorted(seen.items())


def _excluded(rel: np.ndarray, exclude: np.ndarray | None, m: int) -> np.ndarray:
    """``(P, E)`` int64: each pair's documents that are never its negatives, sorted, padded with ``m``.

    Without ``exclude`` that is the pair's own document; ``exclude`` must hold it (checked).
    """
    own = np.asarray(rel, dtype=np.int64)[:, None]
    if exclude is None:
        return own
    ex = np.sort(np.asarray(exclude, dtype=np.int64), axis=1)
    if ex.ndim != 2 or ex.shape[0] != own.shape[0] or ((ex < 0) | (ex > m)).any():
        raise ValueError(f"exclude must be ({own.shape[0]}, E) document positions padded with {m}")
    if not (ex == own).any(axis=1).all():
        raise ValueError("exclude: every pair's row must hold its own document")
    return ex


def _query_groups(values: Tensor, groups: np.ndarray | None) -> Tensor:
    """Per-pair values averaged within each group (a query's pairs), so each query counts once."""
    if groups is None:
        return values
    g = torch.as_tensor(np.unique(np.asarray(groups), return_inverse=True)[1], dtype=torch.int64)
    sums = torch.zeros(int(g.max()) + 1, dtype=values.dtype).index_add_(0, g, values)
    return sums / torch.bincount(g).to(values.dtype)


def risk_curve(
    queries: Tensor,
    documents: Tensor,
    rel: np.ndarray,
    *,
    temperature: float,
    k_max: int,
    generator: torch.Generator,
    exclude: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> dict[str, Any]:
    """R(φ; k, τ) minus its k → ∞ limit on the audited pairs, for k = 1, 2, 4, … ≤ min(k_max, M − |E|).

    Each pair draws one sequence of ``k_max`` negatives (uniform over the documents outside its excluded
    set E, with replacement) and uses its first k for every k, so the estimates are paired across k.

    **Several relevant documents per query.** A task's query with relevant documents R_q contributes one
    pair (q, d⁺) per d⁺ ∈ R_q; ``exclude`` gives each pair E = R_q (its other relevant documents are never
    its negatives) and ``groups`` the query of each pair. The multi-positive risk is then
    R(φ; k, τ) = E_q (1/|R_q|) Σ_{d⁺ ∈ R_q} E[log((e^{s⁺/τ} + Σ_{i ≤ k} e^{s_i/τ}) / k) − s⁺/τ] with
    negatives s_i uniform over the documents not relevant to q — SupCon's L_out averaged per query
    (Khosla et al. 2020, arXiv:2004.11362, eq. 2) with Whiteley's k negatives — and its k → ∞ limit is
    log E_{j ∉ R_q} e^{(s_j − s⁺)/τ}. With one document per query both reduce to Whiteley 2026 eq. 14.

    Args:
        queries: ``(P, D)`` one row per pair.
        documents: ``(M, D)`` the corpus.
        rel: ``(P,)`` each pair's document.
        temperature: τ of the risk.
        k_max: the largest k.
        generator: draws the negatives.
        exclude: ``(P, E)`` each pair's excluded documents (its own among them), padded with ``M``.
        groups: ``(P,)`` the query of each pair: values are averaged within a query before the mean and
            standard error over queries.

    Returns:
        ``{"ks", "risk": {"mean", "se"}, "limit": {"mean", "se"}, "gap": {"mean", "se"}, "slope": fit_slope(...)}``.
    """
    m = documents.shape[0]
    ex = _excluded(rel, exclude, m)
    n_ex = (ex < m).sum(axis=1)
    allowed = m - n_ex  # (P,) documents a pair may draw as negatives
    if m < 2 or allowed.min() < 1:
        raise ValueError("documents: the risk curve needs at least one document outside each pair's excluded set")
    q = torch.nn.functional.normalize(queries.double(), dim=1)
    d = torch.nn.functional.normalize(documents.double(), dim=1)
    rel_t = torch.as_tensor(rel, dtype=torch.int64)
    k_top = min(k_max, int(allowed.min()))
    ks = [2**i for i in range(int(math.log2(k_top)) + 1)]
    # the limit: log (1/|M \ E|) Σ_{j ∉ E} e^{s_j/τ} − s_rel/τ, from log Z over all M and log P(E)
    log_z = log_partition(q, d, temperature=temperature)
    lp = log_prob(q, d, rel_t, temperature=temperature)  # s_rel/τ − log Z ≤ 0
    s_rel = lp + log_z
    ex_t = torch.as_tensor(ex)
    p_ex = torch.zeros_like(lp)
    for j in range(ex.shape[1]):
        col = ex_t[:, j]
        real = col < m
        if real.any():
            p_ex[real] += log_prob(q[real], d, col[real], temperature=temperature).exp()
    allowed_t = torch.as_tensor(allowed, dtype=torch.float64)
    limit = log_z + torch.log1p(-p_ex.clamp(max=1.0)) - torch.log(allowed_t) - s_rel  # (P,)
    for i in torch.nonzero(p_ex > 1 - 1e-8).flatten().tolist():  # E holds ~all the mass: no cancellation
        row = (d @ q[i]) / temperature  # (M,) one pair's logits
        row[ex_t[i][ex_t[i] < m]] = float("-inf")
        limit[i] = torch.logsumexp(row, 0) - torch.log(allowed_t[i]) - s_rel[i]
    per_k: list[list[Tensor]] = [[] for _ in ks]
    block = max(1, (1 << 22) // (k_top * d.shape[1]))
    for s in range(0, q.shape[0], block):
        e = min(s + block, q.shape[0])
        if (allowed == allowed[0]).all():  # uniform over the same count of documents for every pair
            idx = torch.randint(0, int(allowed[0]), (e - s, k_top), generator=generator)
        else:  # floor(u · n) is uniform on {0, …, n − 1}; the clamp guards u·n rounding up to n
            u = torch.rand((e - s, k_top), generator=generator, dtype=torch.float64)
            idx = (u * allowed_t[s:e, None]).long().clamp(max=allowed_t[s:e, None].long() - 1)
        for j in range(ex.shape[1]):  # the r-th allowed document: step over each excluded one, in order
            idx = idx + (idx >= ex_t[s:e, j : j + 1]).long()
        negs = d[idx]  # (B, k_top, D)
        for i, k in enumerate(ks):
            loss = tuple_loss(q[s:e], d[rel_t[s:e]], negs[:, :k], temperature=temperature, normalize=False)
            per_k[i].append(loss)
    limit = _query_groups(limit, groups)
    risk = [mc_estimate(_query_groups(torch.cat(v), groups)) for v in per_k]
    gap = [mc_estimate(_query_groups(torch.cat(v), groups) - limit) for v in per_k]
    lim = mc_estimate(limit)
    return {
        "ks": ks,
        "temperature": temperature,
        "risk": {"mean": [r.mean for r in risk], "se": [r.se for r in risk]},
        "limit": {"mean": lim.mean, "se": lim.se},
        "gap": {"mean": [g.mean for g in gap], "se": [g.se for g in gap]},
        "slope": fit_slope(ks, [g.mean for g in gap], [g.se for g in gap]),
    }


def hard_negative_tails(
    queries: Tensor,
    documents: Tensor,
    rel: np.ndarray,
    *,
    max_anchors: int,
    max_documents: int,
    generator: torch.Generator,
    exclude: np.ndarray | None = None,
) -> TailReport:
    """GPD fit of the pooled query → document negative cosines and WEINCE's per-query tail statistics.

    Uses at most ``max_anchors`` queries and ``max_documents`` documents (seeded draws); each query's own
    document — with ``exclude`` ``(Q, E)`` (padded with ``M``), every document relevant to it — is left
    out (−inf), so every row keeps at least ``max_documents − E`` negatives.
    """
    q = torch.nn.functional.normalize(queries.double(), dim=1)
    d = torch.nn.functional.normalize(documents.double(), dim=1)
    rows = torch.randperm(q.shape[0], generator=generator)[:max_anchors].sort().values
    cols = torch.randperm(d.shape[0], generator=generator)[:max_documents].sort().values
    sims = q[rows] @ d[cols].T  # (R, T) float64
    own = torch.as_tensor(_excluded(rel, exclude, d.shape[0]))[rows]  # (R, E)
    sims = sims.masked_fill((cols[None, :, None] == own[:, None, :]).any(-1), float("-inf"))
    pooled = sims[torch.isfinite(sims)].numpy()
    pot = pot_fit(pooled, threshold_quantile=0.99)
    anchors = anchor_tail_stats(sims)
    exceed = np.sort(pooled[pooled > pot.threshold] - pot.threshold)
    return TailReport(
        pot=pot,
        anchors=anchors,
        frac_weibull=float((anchors.delta_aic > 0).double().mean()),
        xi_isotropic=isotropic_xi(int(q.shape[1])),
        exceedances=exceed,
    )


def geometry(queries: Tensor, documents: Tensor, rel: np.ndarray, *, sample: int, generator: torch.Generator) -> dict:
    """Alignment of the pairs (Wang & Isola 2020, eq. 4) and uniformity (eq. 5) of a sample of each side."""
    rel_t = torch.as_tensor(rel, dtype=torch.int64)
    dq = torch.randperm(documents.shape[0], generator=generator)[:sample]
    qq = torch.randperm(queries.shape[0], generator=generator)[:sample]
    return {
        "alignment": float(alignment(queries, documents[rel_t])),
        "uniformity_documents": float(uniformity(documents[dq])) if dq.numel() > 1 else float("nan"),
        "uniformity_queries": float(uniformity(queries[qq])) if qq.numel() > 1 else float("nan"),
    }


def word_statistics(texts: list[str], reference: list[str]) -> dict[str, np.ndarray]:
    """Per text: mean Zipf frequency of its words (wordfreq, English), mean IDF in ``reference``, word count."""
    import wordfreq

    tokens = [wordfreq.tokenize(t, "en") for t in texts]
    ref_tokens = [set(wordfreq.tokenize(t, "en")) for t in reference]
    df = Counter(w for s in ref_tokens for w in s)
    n = len(ref_tokens)
    freq = np.array([np.mean([wordfreq.zipf_frequency(w, "en") for w in ts]) if ts else np.nan for ts in tokens])
    idf = np.array([np.mean([math.log(n / max(df[w], 1)) for w in ts]) if ts else np.nan for ts in tokens])
    length = np.array([float(len(ts)) for ts in tokens])
    return {"log_frequency": freq, "specificity": idf, "length": length}


def norm_diagnostics(
    norms: np.ndarray,
    *,
    texts: list[str] | None,
    reference_texts: list[str] | None,
    correct_top1: np.ndarray,
    softmax_top1: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The pre-normalisation norm of the queries: against word statistics, and as a top-1 confidence.

    Returns:
        ``{"norm_mean", "norm_cv", "correlations": {name: (ρ, low, high, n)}, "auroc_norm",
        "auroc_softmax"}``; an AUROC is NaN when every query is right (or every one wrong), correlations
        are empty without texts or when the norm is constant (embeddings already normalised).
    """
    norms = np.asarray(norms, dtype=np.float64)
    out: dict[str, Any] = {
        "norm_mean": float(norms.mean()),
        "norm_cv": float(norms.std() / norms.mean()) if norms.mean() > 0 else float("nan"),
        "correlations": {},
        "auroc_norm": float("nan"),
        "auroc_softmax": float("nan"),
    }
    both = 0 < correct_top1.sum() < correct_top1.size
    if both:
        out["auroc_softmax"] = auroc(softmax_top1, correct_top1)
    constant = float(norms.max() - norms.min()) <= 1e-6 * float(norms.max())
    if constant:
        return out
    if both:
        out["auroc_norm"] = auroc(norms, correct_top1)
    if texts is not None:
        stats = word_statistics(texts, reference_texts or texts)
        keep = np.all([np.isfinite(v) for v in stats.values()], axis=0)
        if keep.sum() >= 3:
            corr = norm_correlations(norms[keep], {k: v[keep] for k, v in stats.items()}, n_boot=n_boot, rng=rng)
            out["correlations"] = {k: (*v, int(keep.sum())) for k, v in corr.items()}
    return out
