"""The audit's report, laid out for a reader: the scores first, then each diagnostic as verdict, table and figure.

:func:`task_layout` (an audit on a retrieval task) and :func:`pairs_layout` (an audit on pairs) turn an audit's
results — the dictionary written as ``results.json``, its ``tables`` and ``figures`` already in place — into its
``layout`` member, which :func:`contrastlab.report.write_report` renders in order:

* ``lede`` — one sentence: which model, on what, how many queries and documents, and whether its scores can be
  set beside published ones;
* ``headline`` — the headline scores with their 95% intervals, and MTEB's published score beside each where
  :mod:`contrastlab.tasks.published` knows the model and the task; its ``note`` says whether the two compare;
* ``grid`` — every retrieval score in one grid, a row per family (nDCG, MAP, recall, …), a column per cut-off;
* ``sections`` — each diagnostic (the softmax search's τ, the InfoNCE risk against k, the hard negatives' tail,
  the query norm, the norm paper's claims, compression) as a one-sentence verdict, the position of its table in
  ``tables`` and its figure's file.

Every number comes from the results; nothing is measured here. The ``metrics`` mapping stays in ``results.json``
and is not repeated on the page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from contrastlab.tasks.published import PublishedScores, published_scores

__all__ = ["task_layout", "pairs_layout", "score_grid", "score_label"]

_FAMILIES = {"ndcg": "nDCG", "map": "MAP", "recall": "Recall", "precision": "P", "mrr": "MRR"}


def _family_and_cut(name: str) -> tuple[str, str] | None:
    """``ndcg_at_10`` or ``ndcg@10`` → ``("ndcg", "10")``; ``None`` for a name of neither form."""
    m = re.fullmatch(r"([a-z]+)(?:_at_|@)(\w+)", name)
    return (m.group(1), m.group(2)) if m else None


def score_label(name: str) -> str:
    """How a table names a retrieval score: ``ndcg_at_10`` → ``nDCG@10``, ``recall@1`` → ``Recall@1``, ``map@r`` → ``MAP@R``.

    Examples:
        >>> score_label("precision_at_1"), score_label("map@r")
        ('P@1', 'MAP@R')
    """
    parts = _family_and_cut(name)
    if parts is None:
        return name
    family, cut = parts
    return f"{_FAMILIES.get(family, family)}@{cut.upper() if not cut.isdigit() else cut}"


def _cell(values: Sequence[float]) -> dict[str, float]:
    """A report's interval cell from ``(mean, low, high)``."""
    mean, low, high = (float(v) for v in values[:3])
    return {"mean": mean, "low": low, "high": high}


def score_grid(scores: Mapping[str, Sequence[float]], title: str) -> dict[str, Any]:
    """Every score of the form ``family@k`` / ``family_at_k`` as one table: a row per family, a column per cut-off.

    Args:
        scores: name → ``(mean, low, high)``; names without a numeric cut-off are left out.
        title: the table's title.

    Returns:
        A table (``title``, ``columns``, ``rows``) whose cells are intervals, ``None`` where a family lacks a cut-off.
    """
    grid: dict[str, dict[int, dict[str, float]]] = {}
    for name, values in scores.items():
        parts = _family_and_cut(name)
        if parts is not None and parts[1].isdigit():
            grid.setdefault(parts[0], {})[int(parts[1])] = _cell(values)
    cuts = sorted({k for row in grid.values() for k in row})
    rows = [[_FAMILIES.get(f, f), *(row.get(k) for k in cuts)] for f, row in grid.items()]
    return {"title": title, "columns": ["score", *(f"@{k}" for k in cuts)], "rows": rows}


def _table(results: Mapping[str, Any], key: str) -> int | None:
    """The position in ``tables`` of the first table whose title holds ``key``."""
    for i, t in enumerate(results.get("tables") or []):
        if key in str(t.get("title", "")):
            return i
    return None


def _row_value(results: Mapping[str, Any], table: int | None, label: str) -> Any:
    """The value (second cell) of the row whose first cell starts with ``label`` in table ``table``."""
    if table is None:
        return None
    for row in results["tables"][table]["rows"]:
        if str(row[0]).startswith(label):
            return row[1]
    return None


def _model(results: Mapping[str, Any]) -> str:
    """The audited model as figure titles name it: its name or run, not its path on disk."""
    from contrastlab.audit.figures import model_title

    return model_title(str(results["model"]), str(results["config"].get("model", "")))


def _number(value: Any) -> float:
    """A metric as a float (``None``, JSON's NaN, as NaN)."""
    return float("nan") if value is None else float(value)


def _softmax_verdict(taus: str, ce: float, num_documents: float) -> str:
    return (
        f"The softmax search is sharpest at {taus}: held-out cross-entropy {ce:.3f} nats per query, against "
        f"log M = {math.log(num_documents):.2f} for a uniform search over the documents."
    )


def _risk_verdict(risk: Mapping[str, Any]) -> str:
    slope = risk["slope"]
    if slope["slope"] is None:
        return f"At τ = {risk['temperature']:g} the InfoNCE risk against k has too few points for a slope."
    return (
        f"At τ = {risk['temperature']:g} the InfoNCE risk's gap to its k → ∞ limit falls with log-log slope "
        f"{slope['slope']:.2f} ± {slope['slope_se']:.2f} (Whiteley's O(1/k): −1)."
    )


def _tails_verdict(results: Mapping[str, Any], table: int | None) -> str:
    metrics = results["metrics"]
    if metrics.get("gpd_xi") is None:
        reason = _row_value(results, table, "not fitted")
        return f"The hard negatives' tail was not fitted: {reason}." if reason else "The tail was not fitted."
    xi = float(metrics["gpd_xi"])
    endpoint = _row_value(results, table, "fitted endpoint")
    if xi < 0 and isinstance(endpoint, (int, float)) and endpoint <= 1:
        bound = f"bounded, with a right endpoint at cosine {endpoint:.3f}"
    elif xi < 0 and isinstance(endpoint, (int, float)):
        bound = f"its endpoint {endpoint:.3g} lies beyond a cosine's 1, so no useful bound"
    else:
        bound = "no finite endpoint (ξ̂ ≥ 0)"
    return (
        f"The hardest non-relevant cosines have GPD shape ξ̂ = {xi:.3f}: {bound}; "
        f"{100 * float(metrics['frac_anchors_weibull']):.0f}% of queries favour reverse-Weibull over Gumbel."
    )


def _norm_verdict(metrics: Mapping[str, Any]) -> str:
    norm, soft = _number(metrics.get("auroc_norm")), _number(metrics.get("auroc_softmax"))
    if math.isnan(norm) and _number(metrics.get("norm_cv")) < 1e-6:
        return "The embeddings arrive normalised: the norm carries nothing."
    return (
        f"The query's norm tells a right top-1 from a wrong one with AUROC {norm:.3f}; the softmax search's "
        f"top-1 probability, with {soft:.3f}."
    )


_FIGURES = {
    "Softmax search": "temperature.png",
    "InfoNCE risk": "risk.png",
    "Hard-negative": "tails.png",
    "Pre-normalisation norm": "norms.png",
    "The norm paper's claims": "norm_claims.png",
    "Compression": "compression.png",
}
"""The figure of each diagnostic, by what its table's title holds."""


def _section(title: str, verdict: str, table: str, results: Mapping[str, Any]) -> dict[str, Any]:
    """A section: its title, verdict, the position of the table whose title holds ``table``, its figure."""
    return {
        "title": title,
        "verdict": verdict,
        "table": _table(results, table),
        "figure": _FIGURES[table],
    }


def _layout(
    results: Mapping[str, Any],
    lede: str,
    headline: dict[str, Any],
    scores: Mapping[str, Sequence[float]],
    tau_text: str,
) -> dict[str, Any]:
    """The layout: ``lede``, ``headline``, the grid of ``scores``, then each diagnostic's section.

    The sections: the softmax search (its τ* as ``tau_text``), the InfoNCE risk, tails, norm, the norm paper's
    claims and compression, those measured.
    """
    from contrastlab.audit.output import compression_sentence

    metrics = results["metrics"]
    figures = {str(f["file"]) for f in results.get("figures") or []}
    tails = _table(results, "Hard-negative")
    ce, n_d = float(metrics["cross_entropy_at_tau_star"]), float(metrics["num_documents"])
    sections = [
        _section("The softmax search's temperature", _softmax_verdict(tau_text, ce, n_d), "Softmax search", results),
        _section(
            "InfoNCE risk against the number of negatives",
            _risk_verdict(results["risk_curve"]),
            "InfoNCE risk",
            results,
        ),
        _section("The hard negatives' tail", _tails_verdict(results, tails), "Hard-negative", results),
        _section("The query norm as a confidence", _norm_verdict(metrics), "Pre-normalisation norm", results),
    ]
    claims = results.get("norm_claims")
    if claims:
        sections.append(_section("The norm paper's claims", str(claims["summary"]), "The norm paper's claims", results))
    if results.get("compression") is not None:
        sections.append(_section("Compression", compression_sentence(results["compression"]), "Compression", results))
    for s in sections:
        if s["figure"] not in figures:
            s["figure"] = None
    grid = score_grid(scores, "Every retrieval score: a row per family, a column per cut-off")
    return {"lede": lede, "headline": headline, "grid": grid, "sections": sections}


def _comparability(results: Mapping[str, Any], entry: PublishedScores | None) -> str:
    """A note on whether the audit's scores can be set beside published ones, and why not (``""``: nothing to say)."""
    cfg, task = results["config"], results["task"]
    prov = task.get("provenance") or {}
    reasons = []
    if task.get("subset"):
        sub = prov.get("subset") or {}
        reasons.append(
            f"a seeded subset ({sub.get('queries', '?'):,} of {prov.get('queries', '?'):,} queries, "
            f"{sub.get('documents', '?'):,} of {prov.get('documents', '?'):,} documents)"
        )
    own = entry.max_seq_length if entry is not None else 0
    if cfg.get("max_seq_length") not in (0, own):
        reasons.append(f"texts cut at {cfg['max_seq_length']} tokens")
    if cfg.get("top_k") != 1000:
        reasons.append(f"the top {cfg.get('top_k')} retrieved, not MTEB's 1,000")
    if cfg.get("query_prompt") or cfg.get("document_prompt"):
        reasons.append("prompts put before the texts")
    why = "; ".join(reasons)
    if entry is None:
        return f"Not comparable with published scores: {why}." if reasons else ""
    where = f"Published: {entry.source}, on the whole split"
    return f"{where}. Not comparable with this audit: {why}." if reasons else f"{where}: comparable with this audit."


def task_layout(results: Mapping[str, Any], headline: Sequence[str]) -> dict[str, Any]:
    """The layout of an audit on a retrieval task (:mod:`contrastlab.audit.task_audit`).

    Args:
        results: the audit's results: ``intervals`` (MTEB name → ``(mean, low, high)``), ``metrics``,
            ``tables``, ``figures``, ``task``, ``config``, ``softmax_search``, ``risk_curve``, ``norm_claims``
            and, with compression, ``compression``.
        headline: MTEB's names of the headline scores, the main one first.

    Returns:
        ``{"lede", "headline", "grid", "sections"}``.
    """
    intervals, metrics, task = results["intervals"], results["metrics"], results["task"]
    prov = task.get("provenance") or {}
    whole = (prov.get("subset") or {}).get("of_fingerprint") if task.get("subset") else task.get("fingerprint")
    entry = published_scores(str(results["config"].get("model")), str(whole), str(task["split"]))
    n_q, n_d = int(metrics["num_queries"]), int(metrics["num_documents"])
    lede = (
        f"**{_model(results)}** on **{task['name']}** ({task['split']}): {n_q:,} judged queries against "
        f"{n_d:,} documents, each query's top {results['config'].get('top_k', 0):,} by cosine; intervals are 95% "
        "bootstrap intervals over queries."
    )
    columns = ["score", "this audit (95% interval)"]
    rows: list[list[Any]] = [[score_label(m), _cell(intervals[m])] for m in headline]
    if entry is not None:
        columns.append("MTEB published")
        for row, m in zip(rows, headline, strict=True):
            row.append(entry.scores.get(m))
    softmax = results["softmax_search"]
    taus = softmax["taus"]
    tau_text = (
        f"τ* = {taus[0]:.4f} / {taus[1]:.4f} (two folds of the queries, each query at the other fold's τ*)"
        if softmax["fit_on"] == "other fold"
        else f"τ* = {taus[0]:.4f} (fitted on all queries: too few for two folds)"
    )
    headline_table = {"title": f"Headline scores over {n_q:,} queries", "columns": columns, "rows": rows}
    if note := _comparability(results, entry):
        headline_table["note"] = note
    return _layout(results, lede, headline_table, intervals, tau_text)


def pairs_layout(results: Mapping[str, Any]) -> dict[str, Any]:
    """The layout of an audit on (query, document) pairs (:mod:`contrastlab.audit.run`).

    Args:
        results: the audit's results: ``metrics``, ``tables`` (the first: retrieval, a row per score with
            mean, low, high), ``figures``, ``pairs``, ``model``, ``risk_curve``, ``norm_claims`` and, with
            compression, ``compression``.

    Returns:
        ``{"lede", "headline", "grid", "sections"}``.
    """
    metrics = results["metrics"]
    retrieval = {str(row[0]): row[1:4] for row in results["tables"][0]["rows"]}
    recall = min((n for n in retrieval if n.startswith("recall@")), key=lambda n: int(n.split("@")[1]))
    headline = [recall, *(n for n in retrieval if n.startswith("mrr@")), *(n for n in retrieval if n == "map@r")]
    n_q, n_d = int(metrics["num_queries"]), int(metrics["num_documents"])
    kind = (results.get("pairs") or {}).get("kind", "pairs")
    lede = (
        f"**{_model(results)}** on {n_q:,} held-out queries against {n_d:,} documents ({kind}); intervals are "
        "95% t-intervals over queries."
    )
    headline_table = {
        "title": f"Headline scores over {n_q:,} queries",
        "columns": ["score", "this audit (95% interval)"],
        "rows": [[score_label(m), _cell(retrieval[m])] for m in headline],
    }
    return _layout(results, lede, headline_table, retrieval, f"τ* = {float(metrics['tau_star']):.4f}")
