"""``audit(config, out_dir)``: the four papers' diagnostics on any embedding model, written as a run folder.

Every source is a retrieval task in memory (:class:`~contrastlab.audit.task_audit.TaskInputs`): a task in
BEIR's layout (:mod:`contrastlab.audit.task_audit`), or pairs — a pairs file, the code corpus, a run's
held-out pairs or a ``.npy`` of their embeddings — each audited pair a query whose one document has grade 1
(:func:`pairs_task`). One pipeline audits them all, in five stages, each timed in ``results.json``
(``timing.stages``):

1. **inputs** — the task or the pairs, the model, the seeded choice of queries and documents (all bad input
   fails here);
2. **store** — the embeddings of the chosen queries and documents (:func:`embed`; document ``j``'s id is its
   position);
3. **index** — the documents as a searchable corpus, :class:`~contrastlab.search.sharded.ShardedSearch`:
   the one seam where the engine plugs in. ``engine="local"`` holds them in this process (one shard by
   default: exactly the one-process computation), ``engine="ray"`` in one Ray actor per shard
   (``contrastlab.scale.sharded_search``); both run the same per-shard code and exact merges;
4. **diagnostics** — the top documents of every query ranked as trec_eval ranks them and scored by
   :func:`contrastlab.search.graded.graded_metrics` (MTEB's scores; on pairs also ``recall@k``, ``ndcg@k``,
   ``mrr@K`` and ``map@r`` with Student-t intervals), the softmax search at τ* (on pairs fitted on the valid
   pairs' queries, on a task cross-fitted over two folds), the risk curve, tails, geometry and norms, the
   norm paper's three claims (:mod:`contrastlab.audit.norm_audit`) and, with ``compress``, the compression
   audit (:func:`~contrastlab.audit.compress.compression_audit`) at τ*;
5. **report** — summary, tables and figures, ``results.json`` and ``mteb_results.json`` (MTEB's layout),
   computed first and written into a temporary folder beside ``out_dir``, then moved in, so a failure
   leaves no partial results behind.
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_choice, check_int
from contrastlab.audit import diagnostics as diag
from contrastlab.audit.compress import CompressionResult, compression_audit, plot_compression, pq_min_documents
from contrastlab.audit.config import AuditConfig
from contrastlab.audit.figures import model_title, plot_norms, plot_risk, plot_temperature
from contrastlab.audit.inputs import AuditPairs, encode_texts, load_model, load_pairs
from contrastlab.audit.norm_audit import NormClaims, WordSet, load_words
from contrastlab.audit.output import compression_sentence, open_corpus, plot_claims, risk_table, write_run_folder
from contrastlab.audit.recorded_prompts import resolve_prompts
from contrastlab.audit.report_section import pairs_layout, task_layout
from contrastlab.audit.task_audit import (
    HEADLINE,
    MEASURES,
    TaskInputs,
    load_task_inputs,
    mteb_results,
    task_identity,
    task_inputs,
)
from contrastlab.eval.bootstrap import bootstrap_mean
from contrastlab.eval.probe import mean_ci
from contrastlab.search.graded import graded_metrics, mteb_name, rank_run, tie_keys
from contrastlab.search.sharded import ShardedSearch
from contrastlab.tasks import RetrievalTask

__all__ = [
    "audit",
    "audit_source",
    "ENGINES",
    "AuditInputs",
    "AuditEmbeddings",
    "load_inputs",
    "pairs_task",
    "embed",
    "open_corpus",
    "measure_label",
    "interval_text",
]

_MIN_TAIL_PAIRS = 1000  # the POT fit's 0.99 quantile keeps 1% of the negatives and needs at least 10

ENGINES = ("local", "ray")
"""Where the corpus's shards are searched: ``local`` (this process) or ``ray`` (one actor per shard)."""


def _select(
    pairs: AuditPairs, config: AuditConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(eval pair indices, valid pair indices, document indices searched), capped by the config."""

    def cap(idx: np.ndarray, n: int) -> np.ndarray:
        return np.sort(rng.choice(idx, size=n, replace=False)) if 0 < n < idx.size else idx

    ev = cap(np.flatnonzero(pairs.split == "eval"), config.max_queries)
    va = cap(np.flatnonzero(pairs.split == "valid"), config.max_queries)
    if ev.size == 0:
        raise ValueError("pairs: no pair falls in the audited split (too few pairs?)")
    n_docs = int(pairs.doc_of.max()) + 1 if pairs.documents is None else len(pairs.documents)
    if pairs.doc_emb is not None:
        n_docs = pairs.doc_emb.shape[0]
    docs = np.arange(n_docs)
    if 0 < config.max_documents < n_docs:
        needed = np.unique(pairs.doc_of[np.concatenate([ev, va])])
        rest = np.setdiff1d(docs, needed)
        extra = rng.choice(rest, size=max(0, min(rest.size, config.max_documents - needed.size)), replace=False)
        docs = np.sort(np.concatenate([needed, extra]))
    return ev, va, docs


@dataclass(frozen=True)
class AuditInputs:
    """The inputs stage: the pairs, the model, and which pairs and documents are audited.

    Attributes:
        pairs: the loaded pairs (texts or embeddings).
        encoder: the text encoder, or ``None`` when the pairs carry embeddings.
        eval_pairs: ``(Q,)`` indices of the audited pairs.
        valid_pairs: ``(V,)`` indices of the pairs that fit τ.
        documents: ``(M,)`` indices of the searched documents, sorted.
        words: the word list of the norm paper's frequency claim (``None`` without a text model).
    """

    pairs: AuditPairs
    encoder: Any
    eval_pairs: np.ndarray
    valid_pairs: np.ndarray
    documents: np.ndarray
    words: WordSet | None = None


@dataclass(frozen=True)
class AuditEmbeddings:
    """The store stage: the embeddings of the audited texts (document ``j`` of the store has id ``j``).

    Attributes:
        queries: ``(Q + V, D)`` the audited queries, then the valid ones, before any normalisation.
        documents: ``(M, D)`` the searched documents, in the order of :attr:`AuditInputs.documents`.
        model: the model's description.
        encode_s: seconds spent encoding (0 for given embeddings).
    """

    queries: Tensor
    documents: Tensor
    model: str
    encode_s: float


def load_inputs(cfg: AuditConfig, rng: np.random.Generator) -> AuditInputs:
    """Inputs stage: load the pairs and the model and draw the audited subset; bad input fails here."""
    pairs = load_pairs(cfg)
    words = load_words(cfg, has_text_model=pairs.query_emb is None)  # before the model: a bad file fails at once
    encoder = load_model(cfg) if pairs.query_emb is None else None
    ev, va, docs = _select(pairs, cfg, rng)
    if cfg.compress and cfg.compress_pq_bits and docs.size < pq_min_documents(cfg.compress_pq_bits):
        raise ValueError(
            f"compress_pq_bits: a {cfg.compress_pq_bits}-bit product quantizer needs at least "
            f"{pq_min_documents(cfg.compress_pq_bits)} documents to train on, the audit searches {docs.size}"
        )
    return AuditInputs(pairs=pairs, encoder=encoder, eval_pairs=ev, valid_pairs=va, documents=docs, words=words)


def pairs_task(inputs: AuditInputs) -> TaskInputs:
    """The pairs as a retrieval task: each audited pair a query with its document of grade 1.

    Query ids are the pairs' indices, document ids the documents' indices, both zero-padded so that their
    string order (trec_eval's order of equal scores) is their numeric order; without texts (embeddings
    given) the texts are empty. The valid pairs' queries only fit τ (``fit_doc``).
    """
    pairs, ev, va, docs = inputs.pairs, inputs.eval_pairs, inputs.valid_pairs, inputs.documents
    doc_pos = np.full(int(docs.max()) + 1, -1, dtype=np.int64)
    doc_pos[docs] = np.arange(docs.size)
    width = len(str(max(int(docs.max()), int(pairs.doc_of.size))))
    doc_ids = tuple(f"{j:0{width}d}" for j in docs)
    query_ids = tuple(f"{i:0{width}d}" for i in ev)
    kind = str(pairs.provenance.get("kind", "pairs"))
    task = RetrievalTask(
        name=Path(str(pairs.provenance.get("path", kind))).stem or kind,
        split="test",
        doc_ids=doc_ids,
        doc_texts=tuple(pairs.documents[j] for j in docs) if pairs.documents is not None else ("",) * docs.size,
        query_ids=query_ids,
        query_texts=tuple(pairs.queries[i] for i in ev) if pairs.queries is not None else ("",) * ev.size,
        qrels={q: {doc_ids[doc_pos[pairs.doc_of[i]]]: 1} for q, i in zip(query_ids, ev, strict=True)},
        provenance=pairs.provenance,
    )
    return task_inputs(
        task,
        encoder=inputs.encoder,
        documents=docs,
        fold=None,
        words=inputs.words,
        subset=False,
        pairs=inputs,
        fit_doc=doc_pos[pairs.doc_of[va]],
    )


def embed(inputs: AuditInputs | TaskInputs, cfg: AuditConfig) -> AuditEmbeddings:
    """Store stage: encode (or look up) the audited queries, then the ones fitting τ, and the documents.

    Raises:
        ValueError: the model embeds queries and documents to different dimensions, or (with ``compress``)
            a ``compress_widths`` entry exceeds the embedding width.
    """
    inputs = pairs_task(inputs) if isinstance(inputs, AuditInputs) else inputs
    src, task = inputs.pairs, inputs.task
    t_enc = time.perf_counter()
    if inputs.encoder is not None:
        fit_texts = [src.pairs.queries[i] for i in src.valid_pairs] if src is not None else []
        query_prompt, document_prompt = resolve_prompts(cfg.model, cfg.query_prompt, cfg.document_prompt)
        q_raw, d_raw = (
            encode_texts(
                inputs.encoder, texts, batch_size=cfg.batch_size, progress=cfg.progress, label=label, prompt=prompt
            )
            for texts, label, prompt in (
                ([*task.query_texts, *fit_texts], "queries", query_prompt),
                (list(task.doc_texts), "documents", document_prompt),
            )
        )
        model_desc = inputs.encoder.description
    else:
        assert src is not None and src.pairs.query_emb is not None and src.pairs.doc_emb is not None
        q_raw = src.pairs.query_emb[torch.as_tensor(np.concatenate([src.eval_pairs, src.valid_pairs]))]
        d_raw = src.pairs.doc_emb[torch.as_tensor(src.documents)]
        model_desc = cfg.model
    encode_s = time.perf_counter() - t_enc
    if q_raw.shape[1] != d_raw.shape[1]:
        raise ValueError(f"model: queries embed to D = {q_raw.shape[1]} but documents to D = {d_raw.shape[1]}")
    too_wide = [w for w in cfg.compress_widths if w > d_raw.shape[1]] if cfg.compress else []
    if too_wide:
        raise ValueError(
            f"compress_widths: width {too_wide[0]} is larger than the embedding width D = {d_raw.shape[1]}"
        )
    return AuditEmbeddings(queries=q_raw, documents=d_raw, model=model_desc, encode_s=encode_s)


@contextmanager
def _engine_session(engine: str, address: str | None, temp_dir: Path) -> Iterator[ModuleType | None]:
    """``None`` for the local engine; for Ray, a session (connected, or embedded and stopped after)."""
    if engine == "local":
        if address is not None:
            raise ValueError(f"--address {address}: an address needs --engine ray")
        yield None
        return
    from contrastlab.scale.cluster import ray_session

    temp_dir.mkdir(parents=True, exist_ok=True)
    with ray_session(address, temp_dir=temp_dir) as ray:
        yield ray


def audit(
    config: AuditConfig | None = None,
    out_dir: str | Path | None = None,
    *,
    engine: str = "local",
    shards: int | None = None,
    address: str | None = None,
) -> dict[str, Any]:
    """Audit an embedding model as a similarity-search engine; write results.json, figures and the report.

    Args:
        config: what to audit (:class:`~contrastlab.audit.config.AuditConfig`; default: the bundled MiniLM
            on the standard-library docstring corpus).
        out_dir: the output folder (created; default ``runs/audit-TIMESTAMP``).
        engine: where the document corpus is searched (:func:`open_corpus`): ``"local"`` or ``"ray"``;
            the results are the same (exact merges; float64 sums in another grouping differ by rounding).
        shards: number of document shards (default 1 locally, one per Ray node).
        address: ``HOST:PORT`` of a running Ray cluster for ``engine="ray"`` (default: the current
            connection, or an embedded Ray started for the audit, its temp files beside ``out_dir``, and
            stopped after it).

    Returns:
        The dictionary written to ``results.json`` (plus ``out_dir``).

    Raises:
        ValueError: bad input — a missing model or pairs file, bad file content, a model whose output is
            not a 2-D embedding, an unknown engine — named in the message; nothing is written then.
    """
    cfg = config or AuditConfig()
    query_prompt, document_prompt = resolve_prompts(cfg.model, cfg.query_prompt, cfg.document_prompt)
    cfg = replace(cfg, query_prompt=query_prompt, document_prompt=document_prompt)  # results.json records them
    check_choice("engine", engine, ENGINES)
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"audit-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    t0 = time.perf_counter()
    if shards is not None:
        check_int("shards", shards, 1)
    with _engine_session(engine, address, out.parent) as ray:  # an unreachable address fails first
        return audit_source(cfg, out, ray=ray, shards=shards, engine=engine, address=address, t0=t0)


def audit_source(
    cfg: AuditConfig,
    out: Path,
    *,
    ray: ModuleType | None,
    shards: int | None,
    engine: str,
    address: str | None,
    t0: float,
    encoder: Any = None,
) -> dict[str, Any]:
    """The five stages on ``cfg.task`` or on the pairs, in the caller's engine session ``ray`` (or ``None``).

    ``encoder``: the text model already loaded for ``cfg`` (several tasks, one model); ``None`` loads it.
    """
    started = _dt.datetime.now(_dt.timezone.utc)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    stages: dict[str, float] = {"engine_s": time.perf_counter() - t0}
    t = time.perf_counter()
    if cfg.task is not None:
        inputs = load_task_inputs(cfg, rng)
        inputs = replace(inputs, encoder=load_model(cfg) if encoder is None else encoder)
    else:
        inputs = pairs_task(load_inputs(cfg, rng))
    stages["inputs_s"] = time.perf_counter() - t
    t = time.perf_counter()
    emb = embed(inputs, cfg)
    stages["store_s"] = time.perf_counter() - t
    t = time.perf_counter()
    with open_corpus(emb.documents, shards=shards, ray=ray) as corpus:
        stages["index_s"] = time.perf_counter() - t
        num_shards = corpus.num_shards
        t = time.perf_counter()
        found = _diagnose(inputs, emb, corpus, cfg, rng, gen)
        stages["diagnostics_s"] = time.perf_counter() - t
    timing = {
        "encode_s": emb.encode_s,
        "texts": emb.queries.shape[0] + emb.documents.shape[0],
        "diagnostics_s": stages["diagnostics_s"],
        "stages": stages,
        "engine": {"name": engine, "shards": num_shards, "address": address},
    }
    return _report(cfg, inputs, emb, found, timing, out, started, t0)


@dataclass(frozen=True)
class _Found:
    """What the diagnostics stage measured.

    Attributes:
        per_query: trec_eval key → ``(Q,)`` each query's score.
        intervals: name → ``(mean, low, high)``: on a task each trec_eval key's 95% percentile bootstrap, on
            pairs each of their names' 95% Student-t interval.
        taus: ``(τ*_A, τ*_B)`` the folds' temperatures (equal when fitted once).
        query_tau: ``(Q,)`` the τ each query is scored at.
        curves: per fit, the ``(τ, mean cross-entropy)`` points it evaluated.
        cross_entropy: ``(Q,)`` each query's cross-entropy at its τ; log_partition, entropy: ``(Q,)``.
        fit_on: the queries τ was fitted on (``valid``, ``audited``, ``other fold``, ``all queries``).
        correct_top1: ``(Q,)`` 1 where the first-ranked document has grade > 0.
        softmax_top1: ``(Q,)`` the softmax search's probability of the first-ranked document at the query's τ.
        risk, tails, n_tail_pairs, geo: the risk curve, the tail fit (``None`` when too few negatives), the
            negatives it had, alignment and uniformity.
        norms, texts, nd, claims: the queries' norms and texts, their diagnostics and the norm paper's claims.
        compression: the compression audit on the (query, relevant document) pairs (``None`` without ``compress``).
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
    texts: list[str] | None
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
    per_query = np.bincount(pq, minlength=inputs.judged.num_queries)[pq]
    weights = 1.0 / (per_query * rows.size)
    return diag.fit_temperature(
        queries[pq], corpus, inputs.pair_doc[pick], tau_min=cfg.tau_min, tau_max=cfg.tau_max, weights=weights
    )


def _fit_taus(
    q_u: Tensor, corpus: ShardedSearch, inputs: TaskInputs, cfg: AuditConfig
) -> tuple[tuple[float, float], list[list[tuple[float, float]]], str, np.ndarray]:
    """``(taus, curves, fit_on, query_tau)`` of the softmax search's τ.

    On pairs one τ, fitted on the valid queries (with none, on the audited ones); on a task two-fold
    cross-fitting, each query scored at the other fold's τ.
    """
    n_q = inputs.judged.num_queries
    if inputs.fold is None:
        fit, fit_on = (q_u[n_q:], inputs.fit_doc), "valid"
        if inputs.fit_doc.size == 0:  # tiny inputs: fit τ on the audited queries themselves (said in the summary)
            fit, fit_on = (q_u[torch.as_tensor(inputs.pair_query)], inputs.pair_doc), "audited"
        tau, curve = diag.fit_temperature(fit[0], corpus, fit[1], tau_min=cfg.tau_min, tau_max=cfg.tau_max)
        return (tau, tau), [curve], fit_on, np.full(n_q, tau)
    judged = np.isin(np.arange(n_q), inputs.pair_query)
    folds = [np.flatnonzero((inputs.fold == f) & judged) for f in (0, 1)]
    if min(f.size for f in folds) == 0:  # too few queries for two folds: one τ, fitted on all (said)
        tau, curve = _fit_fold(q_u, corpus, inputs, np.unique(inputs.pair_query), cfg)
        return (tau, tau), [curve, curve], "all queries", np.full(n_q, tau)
    fits = [_fit_fold(q_u, corpus, inputs, f, cfg) for f in folds]
    taus = (fits[0][0], fits[1][0])
    return taus, [fits[0][1], fits[1][1]], "other fold", np.where(inputs.fold == 0, taus[1], taus[0])


def _diagnose(
    inputs: TaskInputs,
    emb: AuditEmbeddings,
    corpus: ShardedSearch,
    cfg: AuditConfig,
    rng: np.random.Generator,
    gen: torch.Generator,
) -> _Found:
    """Diagnostics stage: every measurement; the whole-corpus passes go through ``corpus``."""
    src = inputs.pairs
    n_q = inputs.judged.num_queries
    q_all, d_raw = emb.queries, emb.documents
    q_raw = q_all[:n_q]
    q_all_u = torch.nn.functional.normalize(q_all.double(), dim=1)
    q_u = q_all_u[:n_q]
    top_k = cfg.top_k if src is None else max(cfg.top_k, *cfg.ks)
    ids, _ = task_run(q_u, corpus, inputs, top_k=top_k, ignore_identical_ids=cfg.ignore_identical_ids and src is None)
    named = {} if src is None else diag.pair_measures(cfg.ks)
    per_query = graded_metrics(ids, inputs.judged, [*MEASURES, *named])
    if src is None:
        intervals = {k: bootstrap_mean(per_query[k], cfg.n_boot, rng) for k in per_query}
    else:
        cis = {name: mean_ci(per_query[m.replace(".", "_")].tolist()) for m, name in named.items()}
        intervals = {name: (ci.mean, ci.low, ci.high) for name, ci in cis.items()}

    taus, curves, fit_on, query_tau = _fit_taus(q_all_u, corpus, inputs, cfg)
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
    correct_top1 = (inputs.judged.lookup(top1[:, None])[:, 0] >= 1).astype(np.float64)
    d_u = torch.nn.functional.normalize(d_raw.double(), dim=1)
    top1_score = (q_u * d_u[torch.as_tensor(np.maximum(top1, 0))]).sum(1)
    softmax_top1 = np.exp(top1_score.numpy() / query_tau - log_z)

    pq = torch.as_tensor(inputs.pair_query)
    geo = diag.geometry(q_raw[pq], d_raw, inputs.pair_doc, sample=cfg.uniformity_sample, generator=gen)
    risk = diag.risk_curve(
        q_u[pq],
        d_u,
        inputs.pair_doc,
        temperature=cfg.risk_temperature,
        k_max=cfg.k_max,
        generator=gen,
        exclude=inputs.exclude,
        groups=inputs.pair_query,
    )
    anchors = np.unique(inputs.pair_query)  # the queries with a relevant document, each once
    first = np.searchsorted(inputs.pair_query, anchors)  # pairs are grouped by query: its first pair's row
    widest = int(inputs.exclude.shape[1])
    n_tail_pairs = min(anchors.size, cfg.tail_anchors) * (min(d_raw.shape[0], cfg.tail_documents) - widest)
    tails = (  # a 0.99-quantile threshold needs ≥ 1,000 negative pairs for its 10 exceedances
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
    norms = q_raw.double().norm(dim=1).numpy()
    has_text = src is None or src.pairs.queries is not None
    texts = list(inputs.task.query_texts) if has_text else None
    nd = diag.norm_diagnostics(
        norms,
        texts=texts,
        reference_texts=src.pairs.queries if src is not None else texts,
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
    if cfg.compress:  # the raw embeddings: each prefix is cut from them and renormalised
        compression = compression_audit(
            q_raw[pq],
            d_raw,
            inputs.pair_doc,
            widths=cfg.compress_widths or None,
            temperature=_tau(taus),
            pq_bits=cfg.compress_pq_bits or None,
        )
    return _Found(
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
        texts=texts,
        nd=nd,
        claims=claims,
        compression=compression,
    )


def _tau(taus: tuple[float, float]) -> float:
    """One τ for what is not scored per query (compression, the figure): the folds' geometric mean."""
    return taus[0] if taus[0] == taus[1] else float(np.exp(np.mean(np.log(taus))))


def measure_label(measure: str) -> str:
    """``ndcg_cut.10`` → ``nDCG@10`` for tables."""
    kind, k = measure.split(".")
    return {"ndcg_cut": "nDCG", "map_cut": "MAP", "recall": "Recall", "P": "P", "mrr_cut": "MRR"}[kind] + f"@{k}"


def _retrieval(
    inputs: TaskInputs, found: _Found, cfg: AuditConfig
) -> tuple[str, dict[str, float], dict[str, Any], dict[str, Any]]:
    """The retrieval scores' sentence, metrics, table and ``per_query``: on pairs their names, on a task MTEB's."""
    iv, task, n_q = found.intervals, inputs.task, inputs.judged.num_queries
    src = inputs.pairs
    if src is not None:
        k_first, mrr = f"recall@{min(cfg.ks)}", diag.mrr_key(cfg.ks)
        head = ", ".join(
            f"{n.replace('recall', 'R').replace('mrr', 'MRR')} = {interval_text(iv[n], 3)}" for n in (k_first, mrr)
        )
        table = {
            "title": "Retrieval (mean and 95% t-interval over queries)",
            "columns": ["metric", "mean", "low", "high", "queries"],
            "rows": [[name, *v, n_q] for name, v in iv.items()],
        }
        per_query = {"pair_index": src.eval_pairs}
        for m, n in diag.pair_measures(cfg.ks).items():  # for paired comparisons: R@1 and MRR
            if n == "recall@1" or n.startswith("mrr@"):
                per_query[n] = found.per_query[m.replace(".", "_")]
        return head, {name: v[0] for name, v in iv.items()}, table, per_query
    head = ", ".join(f"{measure_label(m)} = {interval_text(iv[m.replace('.', '_')])}" for m in HEADLINE[:3])
    head += " (95% bootstrap intervals over queries)"
    table = {
        "title": f"{task.name} ({task.split}): retrieval, mean and 95% bootstrap interval over {n_q:,} queries",
        "columns": ["metric", "MTEB name", "mean", "low", "high"],
        "rows": [
            [measure_label(m), mteb_name(m), *iv[m.replace(".", "_")]]
            for m in sorted(MEASURES, key=lambda m: (m not in HEADLINE, MEASURES.index(m)))
            if m in HEADLINE or m.split(".")[1] in ("1", "10", "100")
        ],
    }
    per_query = {"query_ids": list(task.query_ids), **found.per_query}
    return head, {mteb_name(m): iv[m.replace(".", "_")][0] for m in MEASURES}, table, per_query


def interval_text(v: Sequence[float], digits: int = 4) -> str:
    """``(mean, low, high)`` as ``"mean [low, high]"`` with ``digits`` decimals."""
    return f"{v[0]:.{digits}f} [{v[1]:.{digits}f}, {v[2]:.{digits}f}]"


def _report(
    cfg: AuditConfig,
    inputs: TaskInputs,
    emb: AuditEmbeddings,
    found: _Found,
    timing: dict[str, Any],
    out: Path,
    started: _dt.datetime,
    t0: float,
) -> dict[str, Any]:
    """Report stage: summary, tables, figures, ``results.json`` and ``mteb_results.json``, written atomically."""
    import contrastlab
    from contrastlab.host import host_info

    t_report = time.perf_counter()
    task, src, model = inputs.task, inputs.pairs, emb.model
    n_q, n_d, n_pairs = inputs.judged.num_queries, len(task.doc_ids), int(inputs.pair_query.size)
    risk, tails, nd, taus = found.risk, found.tails, found.nd, found.taus
    slope = risk["slope"]
    head, scores, retrieval_table, per_query = _retrieval(inputs, found, cfg)
    ce_ok = found.cross_entropy[np.isfinite(found.cross_entropy)]
    if src is None:
        ce_iv = bootstrap_mean(ce_ok, cfg.n_boot, np.random.default_rng(cfg.seed))
        what = (
            f"{task.name} ({task.split}: {n_q:,} judged queries, {n_pairs:,} relevant (query, document) pairs, "
            f"{n_d:,} documents, top {cfg.top_k:,} by cosine)"
        )
        tau_metrics = {"tau_star_fold_a": taus[0], "tau_star_fold_b": taus[1]}
    else:
        ci = mean_ci(ce_ok.tolist())
        ce_iv = (ci.mean, ci.low, ci.high)
        what = f"{n_q:,} held-out queries against {n_d:,} documents ({src.pairs.provenance.get('kind', 'pairs')})"
        tau_metrics = {"tau_star": taus[0]}
    tau_text = {
        "other fold": f"τ* = {taus[0]:.4f} / {taus[1]:.4f} (two folds of the queries by a hash of their ids, each "
        "query scored at the other fold's τ)",
        "all queries": f"τ* = {taus[0]:.4f} (fitted on all queries: too few for two folds)",
    }.get(found.fit_on, f"τ* = {taus[0]:.4f} (fitted on the {found.fit_on} queries)")
    fmt_slope = "n/a" if slope["slope"] is None else f"{slope['slope']:.2f} ± {slope['slope_se']:.2f}"
    tail_text = (
        f"GPD ξ̂ = {tails.pot.xi:.3f} (endpoint {tails.pot.endpoint_text()}), {100 * tails.frac_weibull:.0f}% of "
        "queries favour reverse-Weibull over Gumbel"
        if tails
        else f"not fitted ({found.n_tail_pairs} query → document negatives; the fit needs {_MIN_TAIL_PAIRS})"
    )
    norm_text = (
        "its embeddings arrive normalised, so the norm carries nothing"
        if math.isnan(nd["auroc_norm"]) and nd["norm_cv"] < 1e-6
        else f"the query norm as a top-1 confidence has AUROC {nd['auroc_norm']:.3f} "
        f"(the softmax search's own top-1 probability: {nd['auroc_softmax']:.3f})"
    )
    subset_text = (
        " A seeded subset of the queries or documents was audited: these scores are not comparable with published ones."
        if inputs.subset
        else ""
    )
    log_m = math.log(n_d)
    summary = (
        f"{model} audited on {what}: {head}.{subset_text} The softmax search: {tau_text}; held-out cross-entropy "
        f"{ce_iv[0]:.3f} nats per query [{ce_iv[1]:.3f}, {ce_iv[2]:.3f}], entropy {float(found.entropy.mean()):.2f} "
        f"of log M = {log_m:.2f}. At τ = {cfg.risk_temperature:g} the InfoNCE risk approaches its k → ∞ limit "
        f"with log-log slope {fmt_slope} (Whiteley: −1). Hard negatives: {tail_text}. Norms: {norm_text}."
    )
    encode_s = timing["encode_s"]
    metrics: dict[str, Any] = {
        **scores,
        **tau_metrics,
        "cross_entropy_at_tau_star": ce_iv[0],
        "log_partition": float(found.log_partition.mean()),
        "entropy": float(found.entropy.mean()),
        "risk_limit": risk["limit"]["mean"],
        "risk_gap_slope": slope["slope"],
        "gpd_xi": tails.pot.xi if tails else None,
        "gpd_endpoint": tails.pot.endpoint if tails else None,
        "frac_anchors_weibull": tails.frac_weibull if tails else None,
        "norm_cv": nd["norm_cv"],
        "auroc_norm": nd["auroc_norm"],
        "auroc_softmax": nd["auroc_softmax"],
        **{f"rho_norm_{k}": v[0] for k, v in nd["correlations"].items()},
        **found.geo,
        "num_queries": float(n_q),
        "num_documents": float(n_d),
        "num_relevant_pairs": float(n_pairs),
        "encode_s": encode_s,
        "texts_per_s": timing["texts"] / encode_s if encode_s > 0 else float("nan"),
    }
    tables = [
        retrieval_table,
        {
            "title": f"Softmax search: {tau_text}",
            "columns": ["quantity", "value"],
            "rows": [
                ["held-out cross-entropy per query (nats)", ce_iv[0]],
                ["its 95% interval", f"[{ce_iv[1]:.4f}, {ce_iv[2]:.4f}]"],
                ["mean log-partition log Z", float(found.log_partition.mean())],
                ["mean entropy (nats)", float(found.entropy.mean())],
                ["log M (uniform search)", log_m],
                ["alignment (pairs)", found.geo["alignment"]],
                ["uniformity (documents)", found.geo["uniformity_documents"]],
                ["uniformity (queries)", found.geo["uniformity_queries"]],
            ],
        },
        risk_table(
            risk,
            f"InfoNCE risk R(φ; k, τ = {cfg.risk_temperature:g}) and its gap to k → ∞ (mean ± s.e. over queries; "
            "a query's other relevant documents never its negatives)",
        ),
        {
            "title": "Hard-negative tails (query → document cosines, relevant documents left out)",
            "columns": ["quantity", "value"],
            "rows": [
                ["GPD shape ξ̂ (< 0: reverse Weibull)", tails.pot.xi],
                ["fitted endpoint u − σ/ξ", tails.pot.endpoint_cell()],
                ["threshold u (99% quantile)", tails.pot.threshold],
                ["exceedances", tails.pot.n_exceed],
                ["ΔAIC GPD vs exponential", tails.pot.delta_aic],
                ["share of queries favouring Weibull", tails.frac_weibull],
                ["ξ of isotropic vectors, −2/(D − 1)", tails.xi_isotropic],
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
    if found.claims is not None:  # the norm paper's claims: their own section
        from contrastlab.audit.norm_audit import section

        claims = section(found.claims)
        summary = f"{summary} {claims['summary']}"
        metrics.update(claims["metrics"])
        tables.append(claims["table"])
    if found.compression is not None:
        summary = f"{summary} {compression_sentence(found.compression)}"
        tables.append(found.compression.table())
    source: dict[str, Any] = (
        {"pairs": src.pairs.provenance, "temperature_curve": found.curves[0]}
        if src is not None
        else {
            "task": {**task_identity(task), "provenance": task.provenance, "subset": inputs.subset},
            "intervals": {mteb_name(m): list(found.intervals[m.replace(".", "_")]) for m in MEASURES},
            "softmax_search": {
                "taus": list(taus),
                "fit_on": found.fit_on,
                "query_fold": inputs.fold,
                "cross_entropy": found.cross_entropy,
                "curves": found.curves,
            },
        }
    )
    results: dict[str, Any] = {
        "name": "audit",
        "summary": summary,
        "metrics": metrics,
        "tables": tables,
        "figures": [],
        "model": model,
        **source,
        "per_query": per_query,  # for paired comparisons of models on the same queries
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
        title = model_title(model, cfg.model)  # the model or run, not its path on disk
        title = title if src is not None else f"{title} on {task.name}"
        fits = {"other fold": ("fold A", "fold B"), "all queries": ("all queries",)}
        labels = fits.get(found.fit_on, (f"{found.fit_on} queries",))
        curves, stars = dict(zip(labels, found.curves, strict=False)), dict(zip(labels, taus, strict=False))
        plot_temperature(curves, stars, stage / "temperature.png", title=title)
        plot_risk(risk, stage / "risk.png", title=title)
        from contrastlab.eval.tails import plot_tail_diagnostics

        if tails:
            plot_tail_diagnostics(tails, stage / "tails.png", title=f"{title}: query → document negatives")
        freq = None
        if found.texts is not None and nd["correlations"]:
            reference = src.pairs.queries if src is not None else None
            freq = diag.word_statistics(found.texts, reference or found.texts)["log_frequency"]
        plot_norms(found.norms, freq, found.correct_top1, stage / "norms.png", title=title)
        if found.claims is not None and (found.claims.word_data is not None or found.claims.pair_data is not None):
            plot_claims(found.claims, stage / "norm_claims.png", title)
        if found.compression is not None:
            plot_compression(found.compression, stage / "compression.png")
        figures = [
            {"file": "temperature.png", "caption": "Held-out cross-entropy against τ, each fit's τ* dotted."},
            {"file": "risk.png", "caption": "The InfoNCE risk's gap to its k → ∞ limit against k."},
            {"file": "tails.png", "caption": "Extreme-value view of the hardest non-relevant documents."},
            {"file": "norms.png", "caption": "Pre-normalisation query norms: word frequency and a relevant top-1."},
            {
                "file": "norm_claims.png",
                "caption": "The norm paper's claims: word norms against frequency by token count, and the "
                "(specific, general) pairs' log-norm differences against their length difference.",
            },
            {
                "file": "compression.png",
                "caption": "Compression on the (query, relevant document) pairs: R@1 against bytes per vector, one "
                "curve per storage (numbers are prefix widths), the full model circled.",
            },
        ]
        return [f for f in figures if (stage / f["file"]).is_file()]

    means = {k: float(v.mean()) for k, v in found.per_query.items()}
    mteb = mteb_results(task, means, evaluation_time=time.perf_counter() - t0, model=model, subset=inputs.subset)
    headline = [mteb_name(m) for m in HEADLINE]
    return write_run_folder(
        results,
        out,
        draw,
        t0=t0,
        t_report=t_report,
        extra={"mteb_results.json": mteb},
        layout=pairs_layout if src is not None else (lambda r: task_layout(r, headline)),
    )
