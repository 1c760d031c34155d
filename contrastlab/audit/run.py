"""``audit(config, out_dir)``: the four papers' diagnostics on any embedding model, written as a run folder.

The output folder gets what every contrastlab run has — ``results.json`` (summary, metrics, tables,
figures, config, provenance, host), its figures, and ``report.md`` / ``report.html`` from
:func:`contrastlab.report.write_report`. Everything is computed first and written into a temporary
folder beside ``out_dir``, then moved in, so a failure leaves no partial results behind.

The audit runs in five stages, each timed in ``results.json`` (``timing.stages``):

1. **inputs** — the pairs, the model, the seeded choice of queries and documents (all bad input fails here);
2. **store** — the embeddings of the chosen queries and documents (document ``j``'s id is its position);
3. **index** — the documents as a searchable corpus, :class:`~contrastlab.search.sharded.ShardedSearch`:
   the one seam where the engine plugs in. ``engine="local"`` holds them in this process (one shard by
   default: exactly the one-process computation), ``engine="ray"`` in one Ray actor per shard
   (``contrastlab.scale.sharded_search``); both run the same per-shard code and exact merges;
4. **diagnostics** — retrieval, the softmax search, the risk curve, tails and norms, the passes over the
   whole document set going through the corpus; then the norm paper's three claims
   (:mod:`contrastlab.audit.norm_audit`, which embeds its word list and word pairs here); with ``compress``,
   the compression audit (:func:`~contrastlab.audit.compress.compression_audit`) of the same queries and
   documents at τ*;
5. **report** — summary, tables and figures, written atomically.
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import time
from collections.abc import Iterator
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
from contrastlab.audit.report_section import pairs_layout
from contrastlab.eval.probe import mean_ci
from contrastlab.search.sharded import ShardedSearch

__all__ = ["audit", "ENGINES", "AuditInputs", "AuditEmbeddings", "load_inputs", "embed", "open_corpus"]

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


def _ci_row(name: str, ci: Any) -> list[Any]:
    return [name, ci.mean, ci.low, ci.high, ci.n]


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


def embed(inputs: AuditInputs, cfg: AuditConfig) -> AuditEmbeddings:
    """Store stage: encode (or look up) the audited queries and documents.

    Raises:
        ValueError: the model embeds queries and documents to different dimensions, or (with ``compress``)
            a ``compress_widths`` entry exceeds the embedding width.
    """
    pairs, ev, va, docs = inputs.pairs, inputs.eval_pairs, inputs.valid_pairs, inputs.documents
    t_enc = time.perf_counter()
    if inputs.encoder is not None:
        assert pairs.queries is not None and pairs.documents is not None
        queries, documents = pairs.queries, pairs.documents
        query_prompt, document_prompt = resolve_prompts(cfg.model, cfg.query_prompt, cfg.document_prompt)
        q_raw, d_raw = (
            encode_texts(
                inputs.encoder, texts, batch_size=cfg.batch_size, progress=cfg.progress, label=label, prompt=prompt
            )
            for texts, label, prompt in (
                ([queries[i] for i in np.concatenate([ev, va])], "queries", query_prompt),
                ([documents[j] for j in docs], "documents", document_prompt),
            )
        )
        model_desc = inputs.encoder.description
    else:
        assert pairs.query_emb is not None and pairs.doc_emb is not None
        q_raw = pairs.query_emb[torch.as_tensor(np.concatenate([ev, va]))]
        d_raw = pairs.doc_emb[torch.as_tensor(docs)]
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
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    if shards is not None:
        check_int("shards", shards, 1)
    stages: dict[str, float] = {}

    with _engine_session(engine, address, out.parent) as ray:  # an unreachable address fails first
        if cfg.task is not None:
            from contrastlab.audit.task_audit import audit_task

            return audit_task(cfg, out, ray=ray, shards=shards, engine=engine, address=address, t0=t0)
        stages["engine_s"] = time.perf_counter() - t0
        t = time.perf_counter()
        inputs = load_inputs(cfg, rng)
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
    """What the diagnostics stage measured (the report stage's input)."""

    ret: diag.RetrievalResult
    geo: dict[str, float]
    tau: float
    curve: list[tuple[float, float]]
    ce_ci: Any
    search: dict[str, float]
    risk: dict[str, Any]
    tails: Any
    n_tail_pairs: int
    norms: np.ndarray
    q_texts: list[str] | None
    nd: dict[str, Any]
    fit_on: str
    claims: NormClaims | None = None
    compression: CompressionResult | None = None


def _diagnose(
    inputs: AuditInputs,
    emb: AuditEmbeddings,
    corpus: ShardedSearch,
    cfg: AuditConfig,
    rng: np.random.Generator,
    gen: torch.Generator,
) -> _Found:
    """Diagnostics stage: every measurement; the whole-corpus passes go through ``corpus``."""
    pairs, ev, va, docs = inputs.pairs, inputs.eval_pairs, inputs.valid_pairs, inputs.documents
    q_raw, d_raw = emb.queries, emb.documents
    doc_pos = np.full(int(docs.max()) + 1, -1, dtype=np.int64)
    doc_pos[docs] = np.arange(docs.size)
    q_eval, q_valid = q_raw[: ev.size], q_raw[ev.size :]
    rel_eval, rel_valid = doc_pos[pairs.doc_of[ev]], doc_pos[pairs.doc_of[va]]
    fit_on = "valid"
    if q_valid.shape[0] == 0:  # tiny inputs: fit τ on the audited queries themselves (said in the summary)
        q_valid, rel_valid, fit_on = q_eval, rel_eval, "audited"

    ret = diag.retrieval(q_eval, corpus, rel_eval, cfg.ks)
    geo = diag.geometry(q_eval, d_raw, rel_eval, sample=cfg.uniformity_sample, generator=gen)
    q_eval_u = torch.nn.functional.normalize(q_eval.double(), dim=1)
    q_valid_u = torch.nn.functional.normalize(q_valid.double(), dim=1)
    d_u = torch.nn.functional.normalize(d_raw.double(), dim=1)
    tau, curve = diag.fit_temperature(q_valid_u, corpus, rel_valid, tau_min=cfg.tau_min, tau_max=cfg.tau_max)
    ce_eval = diag.held_out_cross_entropy(q_eval_u, corpus, rel_eval, tau)
    ce_ci = mean_ci(ce_eval)
    search = diag.softmax_search_summary(q_eval_u, corpus, tau)
    risk = diag.risk_curve(q_eval_u, d_u, rel_eval, temperature=cfg.risk_temperature, k_max=cfg.k_max, generator=gen)
    n_tail_pairs = min(ev.size, cfg.tail_anchors) * (min(docs.size, cfg.tail_documents) - 1)
    tails = (  # a 0.99-quantile threshold needs ≥ 1,000 negative pairs for its 10 exceedances
        diag.hard_negative_tails(
            q_eval, d_raw, rel_eval, max_anchors=cfg.tail_anchors, max_documents=cfg.tail_documents, generator=gen
        )
        if n_tail_pairs >= _MIN_TAIL_PAIRS
        else None
    )
    log_z = corpus.log_partition(q_eval_u, temperature=tau).numpy()
    softmax_top1 = np.exp(ret.top1_score / tau - log_z)  # P_τ(first-ranked document | q)
    norms = q_eval.double().norm(dim=1).numpy()
    q_texts = [pairs.queries[i] for i in ev] if pairs.queries is not None else None
    nd = diag.norm_diagnostics(
        norms,
        texts=q_texts,
        reference_texts=pairs.queries,
        correct_top1=ret.correct_top1,
        softmax_top1=softmax_top1,
        n_boot=cfg.n_boot,
        rng=rng,
    )
    claims = _norm_claims(inputs, norms, q_texts, ret.correct_top1, softmax_top1, cfg, rng)
    compression = None
    if cfg.compress:  # the raw embeddings: each prefix is cut from them and renormalised
        compression = compression_audit(
            q_eval,
            d_raw,
            rel_eval,
            widths=cfg.compress_widths or None,
            temperature=tau,
            pq_bits=cfg.compress_pq_bits or None,
        )
    return _Found(
        ret, geo, tau, curve, ce_ci, search, risk, tails, n_tail_pairs, norms, q_texts, nd, fit_on, claims, compression
    )


def _norm_claims(
    inputs: AuditInputs,
    norms: np.ndarray,
    q_texts: list[str] | None,
    correct_top1: np.ndarray,
    softmax_top1: np.ndarray,
    cfg: AuditConfig,
    rng: np.random.Generator,
) -> NormClaims:
    """The norm paper's three claims (:mod:`contrastlab.audit.norm_audit`): words and pairs embedded here."""
    from contrastlab.audit.norm_audit import measure

    return measure(
        inputs.encoder,
        inputs.words,
        query_texts=q_texts,
        query_norms=norms,
        correct_top1=correct_top1,
        softmax_top1=softmax_top1,
        cfg=cfg,
        rng=rng,
    )


def _report(
    cfg: AuditConfig,
    inputs: AuditInputs,
    emb: AuditEmbeddings,
    found: _Found,
    timing: dict[str, Any],
    out: Path,
    started: _dt.datetime,
    t0: float,
) -> dict[str, Any]:
    """Report stage: summary, tables, figures and the run folder, written atomically."""
    import contrastlab
    from contrastlab.host import host_info

    t_report = time.perf_counter()
    pairs, ev, docs = inputs.pairs, inputs.eval_pairs, inputs.documents
    ret, geo, tau, curve, ce_ci, search = found.ret, found.geo, found.tau, found.curve, found.ce_ci, found.search
    risk, tails, n_tail_pairs, nd = found.risk, found.tails, found.n_tail_pairs, found.nd
    norms, q_texts, fit_on = found.norms, found.q_texts, found.fit_on
    model_desc, encode_s = emb.model, emb.encode_s
    n_texts = timing["texts"]

    m = ret.metrics
    k_first = min(cfg.ks)
    mrr_key = diag.mrr_key(cfg.ks)
    slope = risk["slope"]
    metrics: dict[str, Any] = {name: ci.mean for name, ci in m.items()}
    metrics.update(
        {
            **geo,
            "tau_star": tau,
            "cross_entropy_at_tau_star": ce_ci.mean,
            "log_partition": search["log_partition"],
            "entropy": search["entropy"],
            "risk_limit": risk["limit"]["mean"],
            "risk_gap_slope": slope["slope"],
            "gpd_xi": tails.pot.xi if tails else None,
            "gpd_endpoint": tails.pot.endpoint if tails else None,
            "frac_anchors_weibull": tails.frac_weibull if tails else None,
            "norm_cv": nd["norm_cv"],
            "auroc_norm": nd["auroc_norm"],
            "auroc_softmax": nd["auroc_softmax"],
            **{f"rho_norm_{k}": v[0] for k, v in nd["correlations"].items()},
            "num_queries": float(ev.size),
            "num_documents": float(docs.size),
            "encode_s": encode_s,
            "texts_per_s": n_texts / encode_s if encode_s > 0 else float("nan"),
        }
    )
    fmt_slope = "n/a" if slope["slope"] is None else f"{slope['slope']:.2f} ± {slope['slope_se']:.2f}"
    rk = m[f"recall@{k_first}"]
    norm_text = (
        "its embeddings arrive normalised, so the norm carries nothing"
        if math.isnan(nd["auroc_norm"]) and nd["norm_cv"] < 1e-6
        else f"the query norm as a top-1 confidence has AUROC {nd['auroc_norm']:.3f} "
        f"(the softmax search's own top-1 probability: {nd['auroc_softmax']:.3f})"
    )
    tail_text = (
        f"GPD ξ̂ = {tails.pot.xi:.3f} (endpoint {tails.pot.endpoint_text()}), {100 * tails.frac_weibull:.0f}% of "
        "queries favour reverse-Weibull over Gumbel"
        if tails
        else f"not fitted ({n_tail_pairs} query → document negatives; the fit needs {_MIN_TAIL_PAIRS})"
    )
    summary = (
        f"{model_desc} audited on {ev.size:,} held-out queries against {docs.size:,} documents "
        f"({pairs.provenance.get('kind', 'pairs')}): R@{k_first} = {rk.mean:.3f} [{rk.low:.3f}, {rk.high:.3f}], "
        f"{mrr_key.upper()} = {m[mrr_key].mean:.3f} [{m[mrr_key].low:.3f}, {m[mrr_key].high:.3f}]. "
        f"The softmax search is sharpest at τ* = {tau:.4f} (fitted on the {fit_on} queries; held-out pair "
        f"cross-entropy {ce_ci.mean:.3f} nats, entropy {search['entropy']:.2f} of log M = "
        f"{search['log_num_documents']:.2f}); at τ = {cfg.risk_temperature:g} the InfoNCE risk approaches its k → ∞ "
        f"limit with log-log slope "
        f"{fmt_slope} (Whiteley: −1). Hard negatives: {tail_text}. Norms: {norm_text}."
    )
    tables = [
        {
            "title": "Retrieval (mean and 95% t-interval over queries)",
            "columns": ["metric", "mean", "low", "high", "queries"],
            "rows": [_ci_row(name, ci) for name, ci in m.items()],
        },
        {
            "title": f"Softmax search at τ* = {tau:.4f}",
            "columns": ["quantity", "value"],
            "rows": [
                ["held-out pair cross-entropy (nats)", ce_ci.mean],
                ["its 95% interval", f"[{ce_ci.low:.4f}, {ce_ci.high:.4f}]"],
                ["mean log-partition log Z", search["log_partition"]],
                ["mean entropy (nats)", search["entropy"]],
                ["log M (uniform search)", search["log_num_documents"]],
                ["alignment (pairs)", geo["alignment"]],
                ["uniformity (documents)", geo["uniformity_documents"]],
                ["uniformity (queries)", geo["uniformity_queries"]],
            ],
        },
        risk_table(
            risk,
            f"InfoNCE risk R(φ; k, τ = {cfg.risk_temperature:g}) and its gap to k → ∞ (mean ± s.e. over queries)",
        ),
        {
            "title": "Hard-negative tails (query → document cosines)",
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
                ["AUROC of the norm for a right top-1", nd["auroc_norm"], None, None, ev.size],
                ["AUROC of the softmax top-1 probability", nd["auroc_softmax"], None, None, ev.size],
                ["coefficient of variation of the norm", nd["norm_cv"], None, None, ev.size],
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
    results: dict[str, Any] = {
        "name": "audit",
        "summary": summary,
        "metrics": metrics,
        "tables": tables,
        "figures": [],
        "model": model_desc,
        "pairs": pairs.provenance,
        "per_query": {  # for paired comparisons of models on the same queries
            "pair_index": ev,
            **{k: v for k, v in ret.per_query.items() if k == "recall@1" or k.startswith("mrr@")},
        },
        "risk_curve": risk,
        "temperature_curve": curve,
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
        title = model_title(model_desc, cfg.model)  # the model or run, not its path on disk
        plot_temperature(
            {f"{fit_on} queries": curve}, {f"{fit_on} queries": tau}, stage / "temperature.png", title=title
        )
        plot_risk(risk, stage / "risk.png", title=title)
        from contrastlab.eval.tails import plot_tail_diagnostics

        if tails:
            plot_tail_diagnostics(tails, stage / "tails.png", title=f"{title}: query → document negatives")
        freq = None
        if q_texts is not None and nd["correlations"]:
            freq = diag.word_statistics(q_texts, pairs.queries or q_texts)["log_frequency"]
        plot_norms(norms, freq, ret.correct_top1, stage / "norms.png", title=title)
        if found.claims is not None and (found.claims.word_data is not None or found.claims.pair_data is not None):
            plot_claims(found.claims, stage / "norm_claims.png", title)
        if found.compression is not None:
            plot_compression(found.compression, stage / "compression.png")
        figures = [
            {"file": "temperature.png", "caption": "Held-out pair cross-entropy against τ, τ* dotted."},
            {"file": "risk.png", "caption": "The InfoNCE risk's gap to its k → ∞ limit against k."},
            {"file": "tails.png", "caption": "Extreme-value view of the hardest query → document negatives."},
            {"file": "norms.png", "caption": "Pre-normalisation query norms: word frequency and top-1 correctness."},
            {
                "file": "norm_claims.png",
                "caption": "The norm paper's claims: word norms against frequency by token count, and the "
                "(specific, general) pairs' log-norm differences against their length difference.",
            },
            {
                "file": "compression.png",
                "caption": "Compression: R@1 against bytes per vector, one curve per storage (numbers are prefix "
                "widths), the full model circled.",
            },
        ]
        return [f for f in figures if (stage / f["file"]).is_file()]

    return write_run_folder(results, out, draw, t0=t0, t_report=t_report, layout=pairs_layout)
