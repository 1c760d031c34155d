"""``audit(config, out_dir)``: the four papers' diagnostics on any embedding model, written as a run folder.

The output folder gets what every contrastlab run has — ``results.json`` (summary, metrics, tables,
figures, config, provenance, host), its figures, and ``report.md`` / ``report.html`` from
:func:`contrastlab.report.write_report`. Everything is computed first and written into a temporary
folder beside ``out_dir``, then moved in, so a failure leaves no partial results behind.
"""

from __future__ import annotations

import datetime as _dt
import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contrastlab.audit import diagnostics as diag
from contrastlab.audit.config import AuditConfig
from contrastlab.audit.figures import plot_norms, plot_search
from contrastlab.audit.inputs import AuditPairs, encode_texts, load_model, load_pairs
from contrastlab.eval.probe import mean_ci
from contrastlab.search import log_partition

__all__ = ["audit"]

_MIN_TAIL_PAIRS = 1000  # the POT fit's 0.99 quantile keeps 1% of the negatives and needs at least 10


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


def audit(config: AuditConfig | None = None, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Audit an embedding model as a similarity-search engine; write results.json, figures and the report.

    Args:
        config: what to audit (:class:`~contrastlab.audit.config.AuditConfig`; default: the bundled MiniLM
            on the standard-library docstring corpus).
        out_dir: the output folder (created; default ``runs/audit-TIMESTAMP``).

    Returns:
        The dictionary written to ``results.json`` (plus ``out_dir``).

    Raises:
        ValueError: bad input — a missing model or pairs file, bad file content, a model whose output is
            not a 2-D embedding — named in the message; nothing is written then.
    """
    import contrastlab
    from contrastlab.host import host_info
    from contrastlab.io import to_jsonable, write_json_atomic
    from contrastlab.report import write_report

    cfg = config or AuditConfig()
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"audit-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)

    # ---- inputs: everything that can be wrong with them fails here, before anything is written
    pairs = load_pairs(cfg)
    encoder = load_model(cfg) if pairs.query_emb is None else None
    ev, va, docs = _select(pairs, cfg, rng)
    doc_pos = np.full(int(docs.max()) + 1, -1, dtype=np.int64)
    doc_pos[docs] = np.arange(docs.size)
    t_enc = time.perf_counter()
    if encoder is not None:
        assert pairs.queries is not None and pairs.documents is not None
        queries, documents = pairs.queries, pairs.documents
        q_raw, d_raw = (
            encode_texts(encoder, texts, batch_size=cfg.batch_size, progress=cfg.progress, label=label)
            for texts, label in (
                ([queries[i] for i in np.concatenate([ev, va])], "queries"),
                ([documents[j] for j in docs], "documents"),
            )
        )
        model_desc = encoder.description
    else:
        assert pairs.query_emb is not None and pairs.doc_emb is not None
        q_raw = pairs.query_emb[torch.as_tensor(np.concatenate([ev, va]))]
        d_raw = pairs.doc_emb[torch.as_tensor(docs)]
        model_desc = cfg.model
    encode_s = time.perf_counter() - t_enc
    n_texts = q_raw.shape[0] + d_raw.shape[0]
    if q_raw.shape[1] != d_raw.shape[1]:
        raise ValueError(f"model: queries embed to D = {q_raw.shape[1]} but documents to D = {d_raw.shape[1]}")
    q_eval, q_valid = q_raw[: ev.size], q_raw[ev.size :]
    rel_eval, rel_valid = doc_pos[pairs.doc_of[ev]], doc_pos[pairs.doc_of[va]]
    fit_on = "valid"
    if q_valid.shape[0] == 0:  # tiny inputs: fit τ on the audited queries themselves (said in the summary)
        q_valid, rel_valid, fit_on = q_eval, rel_eval, "audited"

    # ---- diagnostics
    t_diag = time.perf_counter()
    ret = diag.retrieval(q_eval, d_raw, rel_eval, cfg.ks)
    geo = diag.geometry(q_eval, d_raw, rel_eval, sample=cfg.uniformity_sample, generator=gen)
    q_eval_u = torch.nn.functional.normalize(q_eval.double(), dim=1)
    q_valid_u = torch.nn.functional.normalize(q_valid.double(), dim=1)
    d_u = torch.nn.functional.normalize(d_raw.double(), dim=1)
    tau, curve = diag.fit_temperature(q_valid_u, d_u, rel_valid, tau_min=cfg.tau_min, tau_max=cfg.tau_max)
    ce_eval = diag.held_out_cross_entropy(q_eval_u, d_u, rel_eval, tau)
    ce_ci = mean_ci(ce_eval)
    search = diag.softmax_search_summary(q_eval_u, d_u, tau)
    risk = diag.risk_curve(q_eval_u, d_u, rel_eval, temperature=cfg.risk_temperature, k_max=cfg.k_max, generator=gen)
    n_tail_pairs = min(ev.size, cfg.tail_anchors) * (min(docs.size, cfg.tail_documents) - 1)
    tails = (  # a 0.99-quantile threshold needs ≥ 1,000 negative pairs for its 10 exceedances
        diag.hard_negative_tails(
            q_eval, d_raw, rel_eval, max_anchors=cfg.tail_anchors, max_documents=cfg.tail_documents, generator=gen
        )
        if n_tail_pairs >= _MIN_TAIL_PAIRS
        else None
    )
    log_z = log_partition(q_eval_u, d_u, temperature=tau).numpy()
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
    diagnostics_s = time.perf_counter() - t_diag

    # ---- results
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
        f"GPD ξ̂ = {tails.pot.xi:.3f} (endpoint {tails.pot.endpoint:.3f}), {100 * tails.frac_weibull:.0f}% of "
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
        {
            "title": f"InfoNCE risk R(φ; k, τ = {cfg.risk_temperature:g}) and its gap to k → ∞ (mean ± s.e. over queries)",
            "columns": ["k", "risk", "risk s.e.", "gap", "gap s.e."],
            "rows": [
                [k, r, rs, g, gs]
                for k, r, rs, g, gs in zip(
                    risk["ks"],
                    risk["risk"]["mean"],
                    risk["risk"]["se"],
                    risk["gap"]["mean"],
                    risk["gap"]["se"],
                    strict=True,
                )
            ],
        },
        {
            "title": "Hard-negative tails (query → document cosines)",
            "columns": ["quantity", "value"],
            "rows": [
                ["GPD shape ξ̂ (< 0: reverse Weibull)", tails.pot.xi],
                ["fitted endpoint u − σ/ξ", tails.pot.endpoint],
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
        "timing": {"encode_s": encode_s, "texts": n_texts, "diagnostics_s": diagnostics_s},
        "config": asdict(cfg),
        "version": contrastlab.__version__,
        "timestamp": started.isoformat(timespec="seconds"),
        "host": host_info(),
        "argv": list(sys.argv),
    }

    # ---- write: stage in a temporary folder beside out, then move in
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        title = f"{model_desc}"
        plot_search(curve, tau, risk, stage / "search.png", title=title)
        from contrastlab.eval.tails import plot_tail_diagnostics

        if tails:
            plot_tail_diagnostics(tails, stage / "tails.png", title=f"{title}: query → document negatives")
        freq = None
        if q_texts is not None and nd["correlations"]:
            freq = diag.word_statistics(q_texts, pairs.queries or q_texts)["log_frequency"]
        plot_norms(norms, freq, ret.correct_top1, stage / "norms.png", title=title)
        results["figures"] = [
            {
                "file": "search.png",
                "caption": "Held-out pair cross-entropy against τ, and the InfoNCE risk gap against k.",
            },
            {"file": "tails.png", "caption": "Extreme-value view of the hardest query → document negatives."},
            {"file": "norms.png", "caption": "Pre-normalisation query norms: word frequency and top-1 correctness."},
        ]
        results["figures"] = [f for f in results["figures"] if (stage / f["file"]).is_file()]
        results["runtime_s"] = time.perf_counter() - t0
        write_json_atomic(stage / "results.json", results)
        write_report([stage], stage)
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(stage.iterdir()):
            if f.name != "results.json":
                f.replace(out / f.name)
        (stage / "results.json").replace(out / "results.json")  # last: its presence marks a complete audit
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    final = to_jsonable(results)
    final["out_dir"] = str(out)
    return final
