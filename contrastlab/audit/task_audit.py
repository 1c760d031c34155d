"""``audit(config)`` with ``config.task``: the audit on a retrieval task in BEIR's layout.

The same five stages as the audit on pairs (:mod:`contrastlab.audit.run`), on a task's judged queries and
its whole corpus, with several relevant documents per query and graded judgements:

* **retrieval** — the top ``top_k`` (MTEB: 1,000) documents of every query by cosine, ranked as trec_eval
  ranks them (score decreasing, equal scores by document id decreasing; :mod:`contrastlab.search.graded`),
  then MTEB's retrieval scores — nDCG, MAP, recall, precision and MRR at 1, 3, 5, 10, 20, 100 and 1,000 —
  each with a 95% percentile-bootstrap interval over queries (:func:`contrastlab.eval.bootstrap.bootstrap_mean`).
  Queries are embedded as they are, documents as ``(title + " " + text).strip()``, each truncated at the
  model's own ``max_seq_length`` unless the config says otherwise: MTEB's conventions, so the scores sit
  beside the MTEB results repository's (``mteb_results.json``, its layout).
* **the softmax search** — τ* is fitted by two-fold cross-fitting: a SHA-256 of the audit's seed and each
  query id puts the query in fold A or B; τ*_A minimises the mean cross-entropy of fold A's queries, τ*_B
  fold B's, and each query is then scored at the *other* fold's τ, so no query's cross-entropy, log-partition,
  entropy or top-1 probability uses a τ fitted on it. A query's cross-entropy is
  ``−(1/|R_q|) Σ_{d ∈ R_q} log P_τ(d | q)``, P_τ the softmax search over the whole corpus and R_q its
  documents of grade > 0 (SupCon's L_out, Khosla et al. 2020, arXiv:2004.11362), each query weighing
  the same in the fit.
* **risk, tails, geometry, norms** — on the (query, relevant document) pairs, with a query's other relevant
  documents never among its negatives and per-pair values averaged within a query first
  (:func:`contrastlab.audit.diagnostics.risk_curve` states the multi-positive risk); the norm paper's
  claims as on pairs, "a right top-1" meaning a first-ranked document of grade > 0.
* **compression** (``compress``) — on the (query, relevant document) pairs: R@k of each pair's document,
  the query's other relevant documents included in the ranking.

``max_queries`` and ``max_documents`` audit a seeded subset (every judged document of the kept queries is
searched); the summary then says the scores are not comparable with published ones.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from contrastlab.audit import diagnostics as diag
from contrastlab.audit.compress import CompressionResult, compression_audit, plot_compression
from contrastlab.audit.config import AuditConfig
from contrastlab.audit.figures import model_title, plot_norms, plot_risk, plot_temperature
from contrastlab.audit.inputs import encode_texts, load_model
from contrastlab.audit.norm_audit import NormClaims, WordSet, load_words
from contrastlab.audit.output import compression_sentence, open_corpus, plot_claims, risk_table, write_run_folder
from contrastlab.audit.recorded_prompts import resolve_prompts
from contrastlab.audit.report_section import task_layout
from contrastlab.eval.bootstrap import bootstrap_mean
from contrastlab.search.graded import Judgements, graded_metrics, judgements, mteb_name, rank_run, tie_keys
from contrastlab.search.sharded import ShardedSearch
from contrastlab.tasks import RetrievalTask, holdout, read_beir_task

__all__ = ["MTEB_KS", "MEASURES", "HEADLINE", "TaskInputs", "audit_task", "task_identity", "mteb_results"]

MTEB_KS = (1, 3, 5, 10, 20, 100, 1000)
"""The cut-offs of MTEB's retrieval scores."""

MEASURES = tuple(f"{kind}.{k}" for kind in ("ndcg_cut", "map_cut", "recall", "P", "mrr_cut") for k in MTEB_KS)
"""trec_eval's names of every score the task audit computes (MTEB's full retrieval set)."""

HEADLINE = ("ndcg_cut.10", "map_cut.100", "recall.100", "mrr_cut.10", "P.1")
"""The scores in the summary and the first table (nDCG@10 is MTEB's main score)."""

_MIN_TAIL_PAIRS = 1000  # as on pairs: the POT fit's 0.99 quantile needs ≥ 10 exceedances


@dataclass(frozen=True)
class TaskInputs:
    """The inputs stage on a task.

    Attributes:
        task: the task, cut to the audited queries.
        encoder: the text model.
        documents: ``(M,)`` positions in ``task.doc_ids`` of the documents searched, sorted.
        judged: the audited queries' judgements over the searched documents.
        pair_query: ``(P,)`` the query of each (query, document of grade > 0) pair.
        pair_doc: ``(P,)`` its document's position among the searched documents.
        exclude: ``(P, E)`` each pair's query's relevant documents, padded with ``M``.
        fold: ``(Q,)`` 0 or 1, each query's cross-fitting fold.
        words: the norm paper's word list.
        subset: whether queries or documents were capped (scores not comparable with published ones).
    """

    task: RetrievalTask
    encoder: Any
    documents: np.ndarray
    judged: Judgements
    pair_query: np.ndarray
    pair_doc: np.ndarray
    exclude: np.ndarray
    fold: np.ndarray
    words: WordSet | None
    subset: bool


def _fold(query_id: str, seed: int) -> int:
    """0 or 1 from a SHA-256 of the seed and the query id: the same on every machine."""
    return hashlib.sha256(f"tau-fold\x1f{seed}\x1f{query_id}".encode()).digest()[0] & 1


def load_task_inputs(cfg: AuditConfig, rng: np.random.Generator, *, encoder: Any = None) -> TaskInputs:
    """Inputs stage: read the task, the word list and the model, draw the audited subset; bad input fails here.

    ``encoder``: the text model already loaded for ``cfg`` (several tasks, one model); ``None`` loads it.
    """
    assert cfg.task is not None
    if cfg.pairs is not None:
        raise ValueError("pairs: give a task or a pairs file, not both")
    task = read_beir_task(cfg.task, cfg.task_split)
    if cfg.task_part != "all":
        train, dev = holdout(task, cfg.task_dev_fraction, seed=cfg.task_holdout_seed)
        task = train if cfg.task_part == "train" else dev
    if Path(cfg.model).suffix == ".npy":
        raise ValueError("model: a task is audited with a text model (its texts are embedded), not a .npy")
    words = load_words(cfg, has_text_model=True)
    q_keep = np.arange(len(task.query_ids))
    if 0 < cfg.max_queries < q_keep.size:
        q_keep = np.sort(rng.choice(q_keep, size=cfg.max_queries, replace=False))
    ids = tuple(task.query_ids[i] for i in q_keep)
    doc_pos = task.doc_index()
    docs = np.arange(len(task.doc_ids))
    if 0 < cfg.max_documents < docs.size:
        needed = np.unique([doc_pos[d] for q in ids for d in task.qrels[q]])
        rest = np.setdiff1d(docs, needed)
        extra = rng.choice(rest, size=max(0, min(rest.size, cfg.max_documents - needed.size)), replace=False)
        docs = np.sort(np.concatenate([needed, extra]))
    subset = q_keep.size < len(task.query_ids) or docs.size < len(task.doc_ids)
    if subset:
        task = RetrievalTask(
            name=task.name,
            split=task.split,
            doc_ids=tuple(task.doc_ids[j] for j in docs),
            doc_texts=tuple(task.doc_texts[j] for j in docs),
            query_ids=ids,
            query_texts=tuple(task.query_texts[i] for i in q_keep),
            qrels={q: task.qrels[q] for q in ids},
            provenance={
                **task.provenance,
                "subset": {"queries": len(ids), "documents": int(docs.size), "of_fingerprint": task.fingerprint()},
            },
        )
    judged = judgements(task.qrels, task.query_ids, task.doc_ids)
    pos = task.doc_index()
    rel_sets = [sorted(pos[d] for d in task.relevant(q)) for q in task.query_ids]
    if not any(rel_sets):
        raise ValueError(f"task: no query of {task.name} ({task.split}) has a document of grade > 0 to retrieve")
    width = max(len(r) for r in rel_sets)
    m = len(task.doc_ids)
    pair_query = np.array([i for i, r in enumerate(rel_sets) for _ in r], dtype=np.int64)
    pair_doc = np.array([d for r in rel_sets for d in r], dtype=np.int64)
    exclude = np.array([rel_sets[i] + [m] * (width - len(rel_sets[i])) for i in pair_query], dtype=np.int64)
    fold = np.array([_fold(q, cfg.seed) for q in task.query_ids], dtype=np.int64)
    return TaskInputs(
        task=task,
        encoder=load_model(cfg) if encoder is None else encoder,  # last: a task's defect fails before the model loads
        documents=docs,
        judged=judged,
        pair_query=pair_query,
        pair_doc=pair_doc,
        exclude=exclude,
        fold=fold,
        words=words,
        subset=subset,
    )


@dataclass(frozen=True)
class TaskFound:
    """What the diagnostics stage measured on a task.

    Attributes:
        per_query: trec_eval key → ``(Q,)`` each query's score.
        intervals: trec_eval key → ``(mean, low, high)`` (95% percentile bootstrap over queries).
        taus: ``(τ*_A, τ*_B)`` the folds' temperatures (equal when one fold is empty: then fitted on all).
        query_tau: ``(Q,)`` the τ each query is scored at.
        curves: per fold, the ``(τ, mean cross-entropy)`` points of its fit.
        cross_entropy: ``(Q,)`` each query's cross-entropy at its τ.
        log_partition: ``(Q,)``; entropy: ``(Q,)``.
        fit_on: ``"other fold"`` or ``"all queries"``.
        correct_top1: ``(Q,)`` 1 where the first-ranked document has grade > 0.
        softmax_top1: ``(Q,)`` the softmax search's probability of the first-ranked document at the query's τ.
        risk, tails, n_tail_pairs, geo: the multi-positive risk curve, the tail fit (``None`` when too few
            negatives), the negatives it had, alignment and uniformity.
        norms, nd, claims: the queries' norms, their diagnostics and the norm paper's claims.
        compression: the compression audit on the pairs (``None`` without ``compress``).
    """

    per_query: dict[str, np.ndarray]
    intervals: dict[str, tuple[float, float, float]]
    taus: tuple[float, float]
    query_tau: np.ndarray
    curves: list[list[tuple[float, float]]]
    cross_entropy: np.ndarray
    log_partition: np.ndarray
    entropy: np.ndarray
    fit_on: str
    correct_top1: np.ndarray
    softmax_top1: np.ndarray
    risk: dict[str, Any]
    tails: Any
    n_tail_pairs: int
    geo: dict[str, float]
    norms: np.ndarray
    nd: dict[str, Any]
    claims: NormClaims | None
    compression: CompressionResult | None


def task_run(
    queries: Tensor, corpus: ShardedSearch, inputs: TaskInputs, *, top_k: int, ignore_identical_ids: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's top ``top_k`` documents (positions, −1 for an empty slot) and scores, in trec_eval's order.

    With ``ignore_identical_ids`` one more document is retrieved and a document whose id equals the
    query's id is dropped, as MTEB does; queries keep at most ``top_k`` results.
    """
    task = inputs.task
    depth = min(top_k + int(ignore_identical_ids), corpus.ntotal)
    res = corpus.search(queries, depth)
    ids = np.asarray(res.ids, dtype=np.int64)
    scores = np.asarray(res.scores, dtype=np.float64)
    if ignore_identical_ids:
        same = np.array(
            [
                [task.doc_ids[j] == q if j >= 0 else False for j in row]
                for q, row in zip(task.query_ids, ids, strict=True)
            ]
        )
        ids = np.where(same, -1, ids)
    ids, scores = rank_run(ids, scores, tie_keys(task.doc_ids))
    return ids[:, :top_k], scores[:, :top_k]


def _query_cross_entropy(
    queries: Tensor, corpus: ShardedSearch, inputs: TaskInputs, tau: float, rows: np.ndarray
) -> np.ndarray:
    """``(len(rows),)`` each listed query's ``−(1/|R_q|) Σ_{d ∈ R_q} log P_τ(d | q)``."""
    pick = np.isin(inputs.pair_query, rows)
    ce = diag.held_out_cross_entropy(queries[inputs.pair_query[pick]], corpus, inputs.pair_doc[pick], tau).numpy()
    where = np.searchsorted(rows, inputs.pair_query[pick])
    sums = np.bincount(where, weights=ce, minlength=rows.size)
    return sums / np.bincount(where, minlength=rows.size)


def _fit_fold(
    queries: Tensor, corpus: ShardedSearch, inputs: TaskInputs, rows: np.ndarray, cfg: AuditConfig
) -> tuple[float, list[tuple[float, float]]]:
    """τ* of the queries ``rows`` (each query weighing the same, its pairs sharing its weight)."""
    pick = np.isin(inputs.pair_query, rows)
    pq = inputs.pair_query[pick]
    per_query = np.bincount(pq, minlength=inputs.fold.size)[pq]
    weights = 1.0 / (per_query * rows.size)
    return diag.fit_temperature(
        queries[pq], corpus, inputs.pair_doc[pick], tau_min=cfg.tau_min, tau_max=cfg.tau_max, weights=weights
    )


def diagnose_task(
    inputs: TaskInputs,
    q_raw: Tensor,
    d_raw: Tensor,
    corpus: ShardedSearch,
    cfg: AuditConfig,
    rng: np.random.Generator,
    gen: torch.Generator,
) -> TaskFound:
    """Diagnostics stage on a task: every measurement; the whole-corpus passes go through ``corpus``."""
    q_u = torch.nn.functional.normalize(q_raw.double(), dim=1)
    ids, _ = task_run(q_u, corpus, inputs, top_k=cfg.top_k, ignore_identical_ids=cfg.ignore_identical_ids)
    per_query = graded_metrics(ids, inputs.judged, MEASURES)
    intervals = {k: bootstrap_mean(v, cfg.n_boot, rng) for k, v in per_query.items()}

    # τ by two-fold cross-fitting: each query scored at the τ fitted on the other fold
    folds = [
        np.flatnonzero((inputs.fold == f) & np.isin(np.arange(inputs.fold.size), inputs.pair_query)) for f in (0, 1)
    ]
    n_q = inputs.fold.size
    if min(f.size for f in folds) == 0:  # too few queries for two folds: one τ, fitted on all (said)
        everyone = np.unique(inputs.pair_query)
        tau, curve = _fit_fold(q_u, corpus, inputs, everyone, cfg)
        taus, curves, fit_on = (tau, tau), [curve, curve], "all queries"
        query_tau = np.full(n_q, tau)
    else:
        fits = [_fit_fold(q_u, corpus, inputs, f, cfg) for f in folds]
        taus, curves, fit_on = (fits[0][0], fits[1][0]), [fits[0][1], fits[1][1]], "other fold"
        query_tau = np.where(inputs.fold == 0, taus[1], taus[0])
    ce = np.full(n_q, np.nan)
    log_z = np.empty(n_q)
    ent = np.empty(n_q)
    for t in sorted(set(query_tau.tolist())):
        rows = np.flatnonzero(query_tau == t)
        log_z[rows] = corpus.log_partition(q_u[rows], temperature=t).numpy()
        ent[rows] = corpus.entropy(q_u[rows], temperature=t).numpy()
        judged_rows = rows[np.isin(rows, inputs.pair_query)]
        if judged_rows.size:
            ce[judged_rows] = _query_cross_entropy(q_u, corpus, inputs, t, judged_rows)

    top1 = ids[:, 0]
    grade_top1 = inputs.judged.lookup(top1[:, None])[:, 0]
    correct_top1 = (grade_top1 >= 1).astype(np.float64)
    top1_score = (q_u * torch.nn.functional.normalize(d_raw.double(), dim=1)[torch.as_tensor(np.maximum(top1, 0))]).sum(
        1
    )
    softmax_top1 = np.exp(top1_score.numpy() / query_tau - log_z)

    pq = torch.as_tensor(inputs.pair_query)
    risk = diag.risk_curve(
        q_u[pq],
        d_raw,
        inputs.pair_doc,
        temperature=cfg.risk_temperature,
        k_max=cfg.k_max,
        generator=gen,
        exclude=inputs.exclude,
        groups=inputs.pair_query,
    )
    m = d_raw.shape[0]
    anchors = np.unique(inputs.pair_query)  # the queries with a relevant document, each once
    first = np.searchsorted(inputs.pair_query, anchors)  # pairs are grouped by query: its first pair's row
    widest = int(inputs.exclude.shape[1])
    n_tail_pairs = min(anchors.size, cfg.tail_anchors) * (min(m, cfg.tail_documents) - widest)
    tails = (
        diag.hard_negative_tails(
            q_raw[torch.as_tensor(anchors)],
            d_raw,
            inputs.pair_doc[first],
            max_anchors=cfg.tail_anchors,
            max_documents=cfg.tail_documents,
            generator=gen,
            exclude=inputs.exclude[first],
        )
        if n_tail_pairs >= _MIN_TAIL_PAIRS
        else None
    )
    geo = diag.geometry(q_raw[pq], d_raw, inputs.pair_doc, sample=cfg.uniformity_sample, generator=gen)
    norms = q_raw.double().norm(dim=1).numpy()
    texts = list(inputs.task.query_texts)
    nd = diag.norm_diagnostics(
        norms,
        texts=texts,
        reference_texts=texts,
        correct_top1=correct_top1,
        softmax_top1=softmax_top1,
        n_boot=cfg.n_boot,
        rng=rng,
    )
    from contrastlab.audit.norm_audit import measure

    claims = measure(
        inputs.encoder,
        inputs.words,
        query_texts=texts,
        query_norms=norms,
        correct_top1=correct_top1,
        softmax_top1=softmax_top1,
        cfg=cfg,
        rng=rng,
    )
    compression = None
    if cfg.compress:
        compression = compression_audit(
            q_raw[pq],
            d_raw,
            inputs.pair_doc,
            widths=cfg.compress_widths or None,
            temperature=float(np.exp(np.mean(np.log(taus)))),
            pq_bits=cfg.compress_pq_bits or None,
        )
    return TaskFound(
        per_query=per_query,
        intervals=intervals,
        taus=taus,
        query_tau=query_tau,
        curves=curves,
        cross_entropy=ce,
        log_partition=log_z,
        entropy=ent,
        fit_on=fit_on,
        correct_top1=correct_top1,
        softmax_top1=softmax_top1,
        risk=risk,
        tails=tails,
        n_tail_pairs=n_tail_pairs,
        geo=geo,
        norms=norms,
        nd=nd,
        claims=claims,
        compression=compression,
    )


def task_identity(task: RetrievalTask) -> dict[str, Any]:
    """What a comparison checks before it pairs two audits: task, split, queries, corpus and judgements."""

    def digest(obj: Any) -> str:
        import json

        return hashlib.sha256(json.dumps(obj, ensure_ascii=False, sort_keys=True).encode()).hexdigest()

    return {
        "name": task.name,
        "split": task.split,
        "queries": digest(list(task.query_ids)),
        "corpus": digest([list(task.doc_ids), list(task.doc_texts)]),
        "qrels": digest({q: sorted(v.items()) for q, v in task.qrels.items()}),
        "fingerprint": task.fingerprint(),
    }


def mteb_results(
    task: RetrievalTask, means: dict[str, float], *, evaluation_time: float, model: str, subset: bool
) -> dict[str, Any]:
    """The task's scores in MTEB's results-JSON layout (``scores[split][0]`` with ``ndcg_at_10``, …).

    ``main_score`` is nDCG@10, as MTEB's retrieval tasks have it. ``dataset_revision`` is the task's
    content fingerprint (a folder on disk has no Hugging Face revision).
    """
    import contrastlab

    scores: dict[str, Any] = {"hf_subset": "default", "languages": [], "main_score": means["ndcg_cut_10"]}
    for m in MEASURES:
        scores[mteb_name(m)] = means[m.replace(".", "_")]
    return {
        "dataset_revision": task.fingerprint(),
        "task_name": task.name,
        "mteb_version": None,
        "evaluation_time": evaluation_time,
        "kg_co2_emissions": None,
        "scores": {task.split: [scores]},
        "model_name": model,
        "written_by": f"contrastlab {contrastlab.__version__}",
        "comparable": not subset,
    }


def audit_task(
    cfg: AuditConfig,
    out: Path,
    *,
    ray: Any,
    shards: int | None,
    engine: str,
    address: str | None,
    t0: float,
    encoder: Any = None,
) -> dict[str, Any]:
    """The audit on ``cfg.task``: the five stages, then ``results.json``, ``mteb_results.json`` and the report.

    ``ray``: a connected Ray module or ``None`` (the caller's engine session). ``encoder``: the text model
    already loaded for ``cfg`` (:func:`contrastlab.audit.task_suite.audit_tasks` loads it once for every
    task); ``None`` loads it.
    """
    started = _dt.datetime.now(_dt.timezone.utc)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    stages: dict[str, float] = {"engine_s": time.perf_counter() - t0}
    t = time.perf_counter()
    inputs = load_task_inputs(cfg, rng, encoder=encoder)
    stages["inputs_s"] = time.perf_counter() - t
    t = time.perf_counter()
    task = inputs.task
    query_prompt, document_prompt = resolve_prompts(cfg.model, cfg.query_prompt, cfg.document_prompt)
    q_raw, d_raw = (
        encode_texts(
            inputs.encoder, list(texts), batch_size=cfg.batch_size, progress=cfg.progress, label=label, prompt=prompt
        )
        for texts, label, prompt in (
            (task.query_texts, "queries", query_prompt),
            (task.doc_texts, "documents", document_prompt),
        )
    )
    encode_s = time.perf_counter() - t
    stages["store_s"] = encode_s
    if q_raw.shape[1] != d_raw.shape[1]:
        raise ValueError(f"model: queries embed to D = {q_raw.shape[1]} but documents to D = {d_raw.shape[1]}")
    too_wide = [w for w in cfg.compress_widths if w > d_raw.shape[1]] if cfg.compress else []
    if too_wide:
        raise ValueError(
            f"compress_widths: width {too_wide[0]} is larger than the embedding width D = {d_raw.shape[1]}"
        )
    t = time.perf_counter()
    with open_corpus(d_raw, shards=shards, ray=ray) as corpus:
        stages["index_s"] = time.perf_counter() - t
        num_shards = corpus.num_shards
        t = time.perf_counter()
        found = diagnose_task(inputs, q_raw, d_raw, corpus, cfg, rng, gen)
        stages["diagnostics_s"] = time.perf_counter() - t
    timing = {
        "encode_s": encode_s,
        "texts": q_raw.shape[0] + d_raw.shape[0],
        "diagnostics_s": stages["diagnostics_s"],
        "stages": stages,
        "engine": {"name": engine, "shards": num_shards, "address": address},
    }
    return _task_report(cfg, inputs, found, timing, out, started, t0, model=inputs.encoder.description)


def _label(measure: str) -> str:
    """``ndcg_cut.10`` → ``nDCG@10`` for tables."""
    kind, k = measure.split(".")
    return {"ndcg_cut": "nDCG", "map_cut": "MAP", "recall": "Recall", "P": "P", "mrr_cut": "MRR"}[kind] + f"@{k}"


def _task_report(
    cfg: AuditConfig,
    inputs: TaskInputs,
    found: TaskFound,
    timing: dict[str, Any],
    out: Path,
    started: _dt.datetime,
    t0: float,
    *,
    model: str,
) -> dict[str, Any]:
    """Report stage on a task: summary, tables, figures, ``results.json`` and ``mteb_results.json``."""
    import contrastlab
    from contrastlab.host import host_info

    t_report = time.perf_counter()
    task = inputs.task
    iv = found.intervals
    means = {k: v[0] for k, v in iv.items()}
    n_q, n_d = len(task.query_ids), len(task.doc_ids)
    n_pairs = int(inputs.pair_query.size)
    risk, tails, nd = found.risk, found.tails, found.nd
    slope = risk["slope"]
    fmt_slope = "n/a" if slope["slope"] is None else f"{slope['slope']:.2f} ± {slope['slope_se']:.2f}"
    ce_ok = np.isfinite(found.cross_entropy)
    ce_mean, ce_low, ce_high = bootstrap_mean(found.cross_entropy[ce_ok], cfg.n_boot, np.random.default_rng(cfg.seed))
    head = ", ".join(
        f"{_label(m)} = {iv[m.replace('.', '_')][0]:.4f} [{iv[m.replace('.', '_')][1]:.4f}, {iv[m.replace('.', '_')][2]:.4f}]"
        for m in HEADLINE[:3]
    )
    tau_text = (
        f"τ* = {found.taus[0]:.4f} / {found.taus[1]:.4f} (two folds of the queries by a hash of their ids, each "
        "query scored at the other fold's τ)"
        if found.fit_on == "other fold"
        else f"τ* = {found.taus[0]:.4f} (fitted on all queries: too few for two folds)"
    )
    tail_text = (
        f"GPD ξ̂ = {tails.pot.xi:.3f} (endpoint {tails.pot.endpoint_text()}), {100 * tails.frac_weibull:.0f}% of "
        "queries favour reverse-Weibull over Gumbel"
        if tails
        else f"not fitted ({found.n_tail_pairs} query → document negatives; the fit needs {_MIN_TAIL_PAIRS})"
    )
    subset_text = (
        " A seeded subset of the queries or documents was audited: these scores are not comparable with published ones."
        if inputs.subset
        else ""
    )
    summary = (
        f"{model} audited on {task.name} ({task.split}: {n_q:,} judged queries, {n_pairs:,} relevant (query, "
        f"document) pairs, {n_d:,} documents, top {cfg.top_k:,} by cosine): {head} (95% bootstrap intervals over "
        f"queries).{subset_text} The softmax search: {tau_text}; held-out cross-entropy {ce_mean:.3f} nats per "
        f"query [{ce_low:.3f}, {ce_high:.3f}], entropy {float(found.entropy.mean()):.2f} of log M = {math.log(n_d):.2f}. "
        f"At τ = {cfg.risk_temperature:g} the multi-positive InfoNCE risk approaches its k → ∞ limit with log-log "
        f"slope {fmt_slope} (Whiteley: −1). Hard negatives: {tail_text}. The query norm as a top-1 confidence has "
        f"AUROC {nd['auroc_norm']:.3f} (the softmax search's top-1 probability: {nd['auroc_softmax']:.3f})."
    )
    metrics: dict[str, Any] = {mteb_name(m): means[m.replace(".", "_")] for m in MEASURES}
    metrics.update(
        {
            "tau_star_fold_a": found.taus[0],
            "tau_star_fold_b": found.taus[1],
            "cross_entropy_at_tau_star": ce_mean,
            "log_partition": float(found.log_partition.mean()),
            "entropy": float(found.entropy.mean()),
            "risk_limit": risk["limit"]["mean"],
            "risk_gap_slope": slope["slope"],
            "gpd_xi": tails.pot.xi if tails else None,
            "frac_anchors_weibull": tails.frac_weibull if tails else None,
            "norm_cv": nd["norm_cv"],
            "auroc_norm": nd["auroc_norm"],
            "auroc_softmax": nd["auroc_softmax"],
            **found.geo,
            "num_queries": float(n_q),
            "num_documents": float(n_d),
            "num_relevant_pairs": float(n_pairs),
            "encode_s": timing["encode_s"],
        }
    )
    tables: list[dict[str, Any]] = [
        {
            "title": f"{task.name} ({task.split}): retrieval, mean and 95% bootstrap interval over {n_q:,} queries",
            "columns": ["metric", "MTEB name", "mean", "low", "high"],
            "rows": [
                [_label(m), mteb_name(m), *iv[m.replace(".", "_")]]
                for m in sorted(MEASURES, key=lambda m: (m not in HEADLINE, MEASURES.index(m)))
                if m in HEADLINE or m.split(".")[1] in ("1", "10", "100")
            ],
        },
        {
            "title": "Softmax search (τ cross-fitted: each query at the other fold's τ*)",
            "columns": ["quantity", "value"],
            "rows": [
                ["τ* of fold A / fold B", f"{found.taus[0]:.4f} / {found.taus[1]:.4f}"],
                ["held-out cross-entropy per query (nats)", ce_mean],
                ["its 95% bootstrap interval", f"[{ce_low:.4f}, {ce_high:.4f}]"],
                ["mean log-partition log Z", float(found.log_partition.mean())],
                ["mean entropy (nats)", float(found.entropy.mean())],
                ["log M (uniform search)", math.log(n_d)],
                ["alignment (pairs)", found.geo["alignment"]],
                ["uniformity (documents)", found.geo["uniformity_documents"]],
            ],
        },
        risk_table(
            risk,
            f"Multi-positive InfoNCE risk R(φ; k, τ = {cfg.risk_temperature:g}) and its gap to k → ∞ "
            "(mean ± s.e. over queries)",
        ),
        {
            "title": "Hard-negative tails (query → document cosines, relevant documents left out)",
            "columns": ["quantity", "value"],
            "rows": [
                ["GPD shape ξ̂ (< 0: reverse Weibull)", tails.pot.xi],
                ["fitted endpoint u − σ/ξ", tails.pot.endpoint_cell()],
                ["exceedances", tails.pot.n_exceed],
                ["share of queries favouring Weibull", tails.frac_weibull],
            ]
            if tails
            else [["not fitted", tail_text]],
        },
        {
            "title": "Pre-normalisation norm of the queries",
            "columns": ["quantity", "value", "low", "high", "n"],
            "rows": [
                ["AUROC of the norm for a relevant top-1", nd["auroc_norm"], None, None, n_q],
                ["AUROC of the softmax top-1 probability", nd["auroc_softmax"], None, None, n_q],
                ["coefficient of variation of the norm", nd["norm_cv"], None, None, n_q],
                *[[f"Spearman ρ(norm, {k})", *v] for k, v in nd["correlations"].items()],
            ],
        },
    ]
    if found.claims is not None:
        from contrastlab.audit.norm_audit import section

        claims = section(found.claims)
        summary = f"{summary} {claims['summary']}"
        metrics.update(claims["metrics"])
        tables.append(claims["table"])
    if found.compression is not None:
        summary = f"{summary} {compression_sentence(found.compression)}"
        tables.append(found.compression.table())
    identity = task_identity(task)
    results: dict[str, Any] = {
        "name": "audit",
        "summary": summary,
        "metrics": metrics,
        "tables": tables,
        "figures": [],
        "model": model,
        "task": {**identity, "provenance": task.provenance, "subset": inputs.subset},
        "per_query": {"query_ids": list(task.query_ids), **found.per_query},
        "intervals": {mteb_name(m): list(iv[m.replace(".", "_")]) for m in MEASURES},
        "softmax_search": {
            "taus": list(found.taus),
            "fit_on": found.fit_on,
            "query_fold": inputs.fold,
            "cross_entropy": found.cross_entropy,
            "curves": found.curves,
        },
        "risk_curve": risk,
        "norm_claims": claims["results"] if found.claims is not None else None,
        "timing": timing,
        "config": asdict(cfg),
        "version": contrastlab.__version__,
        "timestamp": started.isoformat(timespec="seconds"),
        "host": host_info(),
        "argv": list(sys.argv),
    }
    if found.compression is not None:
        results["compression"] = found.compression

    def draw(stage: Path) -> list[dict[str, str]]:
        title = f"{model_title(model, cfg.model)} on {task.name}"  # the model or run, not its path on disk
        folds = ("fold A", "fold B") if found.fit_on == "other fold" else ("all queries",)
        curves, taus = dict(zip(folds, found.curves, strict=False)), dict(zip(folds, found.taus, strict=False))
        plot_temperature(curves, taus, stage / "temperature.png", title=title)
        plot_risk(risk, stage / "risk.png", title=title)
        from contrastlab.eval.tails import plot_tail_diagnostics

        if tails:
            plot_tail_diagnostics(tails, stage / "tails.png", title=f"{title}: query → document negatives")
        plot_norms(found.norms, None, found.correct_top1, stage / "norms.png", title=title)
        if found.claims is not None and (found.claims.word_data is not None or found.claims.pair_data is not None):
            plot_claims(found.claims, stage / "norm_claims.png", title)
        if found.compression is not None:
            plot_compression(found.compression, stage / "compression.png")
        figures = [
            {"file": "temperature.png", "caption": "Each fold's held-out cross-entropy against τ, its τ* dotted."},
            {"file": "risk.png", "caption": "The multi-positive InfoNCE risk's gap to its k → ∞ limit against k."},
            {"file": "tails.png", "caption": "Extreme-value view of the hardest non-relevant documents."},
            {"file": "norms.png", "caption": "Pre-normalisation query norms and a relevant top-1."},
            {"file": "norm_claims.png", "caption": "The norm paper's claims on this model."},
            {"file": "compression.png", "caption": "Compression on the (query, relevant document) pairs."},
        ]
        return [f for f in figures if (stage / f["file"]).is_file()]

    mteb = mteb_results(task, means, evaluation_time=time.perf_counter() - t0, model=model, subset=inputs.subset)
    headline = [mteb_name(m) for m in HEADLINE]
    return write_run_folder(
        results,
        out,
        draw,
        t0=t0,
        t_report=t_report,
        extra={"mteb_results.json": mteb},
        layout=lambda r: task_layout(r, headline),
    )
