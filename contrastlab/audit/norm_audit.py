"""The norm paper's claims as a part of ``contrastlab audit``: what is embedded, measured and reported.

The audit's text model embeds, each on its own and up to its final ``Normalize``:

* **frequency** — a word list (``--words FILE``, one word or text per line; default the built-in
  frequency-stratified list, :func:`~contrastlab.audit.word_lists.builtin_words`): the norm against the
  ``wordfreq`` Zipf frequency, Spearman and partial Spearman with characters and model tokens held fixed
  (:func:`~contrastlab.audit.norm_claims.assess_frequency`). The same is measured on the audited queries
  (sentences, whose norm tracks their length) and reported beside it; the verdict rests on the word list;
* **specificity** — the 120 (specific, general) pairs of :data:`~contrastlab.audit.hypernyms.HYPERNYM_PAIRS`:
  the paired log-norm difference at equal length (:func:`~contrastlab.audit.norm_claims.assess_specificity`);
* **uncertainty** — nothing new is embedded: the audited queries' norms as a confidence for a right top-1,
  beside the softmax search's top-1 probability (:func:`~contrastlab.audit.norm_claims.assess_uncertainty`).

A model given as embeddings (a ``.npy``, a run of a non-text encoder) has no text model: frequency and
specificity are then "not measured", and a ``--words`` file is refused. Norms that are constant (a model
whose output is already normalised) make every claim "not measured".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from contrastlab.audit.config import AuditConfig
from contrastlab.audit.norm_claims import (
    PREDICTED,
    STATISTICS,
    ClaimResult,
    Estimate,
    assess_frequency,
    assess_specificity,
)
from contrastlab.audit.norm_claims import assess_uncertainty as _assess_uncertainty

__all__ = ["WordSet", "NormClaims", "load_words", "measure", "section"]

CLAIMS = ("frequency", "specificity", "uncertainty")

_DETAILS = {  # the report's names of each claim's other statistics
    "spearman": "ρ(norm, Zipf)",
    "partial_chars": "ρ(norm, Zipf | chars)",
    "partial_tokens": "ρ(norm, Zipf | tokens)",
    "mean_log_ratio": "Δ log-norm, unadjusted",
    "sign_fraction": "share of pairs with specific > general",
    "adjusted_length_frequency": "Δ log-norm at equal chars, tokens and Zipf",
    "auroc_softmax": "AUROC(softmax top-1 probability → right top-1)",
}


@dataclass(frozen=True)
class WordSet:
    """The words the frequency claim is measured on.

    Attributes:
        texts: one word or text per item.
        zipf: ``(n,)`` the mean ``wordfreq`` Zipf value of each item's known words.
        provenance: where the list came from (``builtin`` with its size, or the file).
    """

    texts: list[str]
    zipf: np.ndarray
    provenance: dict[str, Any]


@dataclass(frozen=True)
class NormClaims:
    """The three claims on one model, and the frequency claim on the audited queries.

    Attributes:
        claims: ``frequency``, ``specificity``, ``uncertainty`` → result.
        queries_frequency: the frequency statistics on the audited queries (``None`` without text).
        words: provenance of the word list (``None`` without a text model).
        word_data: per word of the list with a known word: ``norm``, ``zipf``, ``chars``, ``tokens``
            ``(n,)`` arrays (``None`` when frequency was not measured); for the figure.
        pair_data: per hypernym pair: ``log_ratio`` (log‖z_specific‖ − log‖z_general‖), ``delta_chars``,
            ``delta_tokens`` ``(P,)`` arrays (``None`` when specificity was not measured).
    """

    claims: dict[str, ClaimResult]
    queries_frequency: ClaimResult | None
    words: dict[str, Any] | None
    word_data: dict[str, np.ndarray] | None = None
    pair_data: dict[str, np.ndarray] | None = None


def load_words(config: AuditConfig, *, has_text_model: bool) -> WordSet | None:
    """The word list of the frequency claim, validated (the inputs stage: bad input fails before encoding).

    Returns:
        ``None`` when there is no text model to embed words with (and no ``words`` file was given).

    Raises:
        ValueError: naming ``words``: a file given for a model without text, an unreadable file, a line
            none of whose words ``wordfreq`` knows.
    """
    from contrastlab.audit.word_lists import BUILTIN_VOCABULARY, builtin_words, read_word_list, zipf_frequencies

    if not has_text_model:
        if config.words:
            raise ValueError(
                f"words: {config.words} cannot be embedded: the model {config.model} is given as embeddings, "
                "with no text model"
            )
        return None
    if config.words:
        texts = read_word_list(config.words)
        provenance: dict[str, Any] = {"kind": "file", "path": str(config.words), "items": len(texts)}
    else:
        texts = builtin_words(config.norm_words)
        provenance = {
            "kind": "builtin",
            "items": len(texts),
            "rule": f"evenly spaced ranks among wordfreq's {BUILTIN_VOCABULARY:,} most frequent alphabetic English words",
        }
    zipf, _ = zipf_frequencies(texts)
    missing = np.flatnonzero(~np.isfinite(zipf))
    if missing.size:
        shown = ", ".join(f"line {i + 1} {texts[i]!r}" for i in missing[:3])
        more = f" and {missing.size - 3} more" if missing.size > 3 else ""
        raise ValueError(
            f"words: {config.words}: {missing.size} item(s) with no word wordfreq knows (Zipf 0), so no frequency: "
            f"{shown}{more}"
        )
    provenance["wordfreq"] = _version("wordfreq")
    return WordSet(texts=texts, zipf=zipf, provenance=provenance)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def _constant(norms: np.ndarray) -> bool:
    return float(norms.max() - norms.min()) <= 1e-6 * float(norms.max())


def _not_measured(claim: str, why: str) -> ClaimResult:
    nan = float("nan")
    null = 0.5 if claim == "uncertainty" else 0.0
    return ClaimResult(claim, f"{STATISTICS[claim]} — {why}", Estimate(nan, nan, nan, 0), null, "not measured")


def _frequency_on(
    norms: np.ndarray, texts: list[str], zipf: np.ndarray, encoder: Any, cfg: AuditConfig, rng: np.random.Generator
) -> tuple[ClaimResult, dict[str, np.ndarray] | None]:
    """The frequency claim on the items with a known word, and their ``norm``, ``zipf``, ``chars``, ``tokens``."""
    from contrastlab.audit.word_lists import token_counts

    keep = np.flatnonzero(np.isfinite(zipf))
    kept = [texts[i] for i in keep]
    if keep.size < 5 or _constant(norms[keep]):
        why = "norms are constant" if keep.size >= 5 else f"{keep.size} items with a known word"
        return _not_measured("frequency", why), None
    data = {
        "norm": norms[keep],
        "zipf": zipf[keep],
        "chars": np.array([len(t) for t in kept], dtype=np.float64),
        "tokens": token_counts(encoder, kept).astype(np.float64),
    }
    result = assess_frequency(
        data["norm"], data["zipf"], chars=data["chars"], tokens=data["tokens"], n_boot=cfg.n_boot, rng=rng
    )
    return result, data


def _embed_norms(encoder: Any, texts: list[str], cfg: AuditConfig, label: str) -> np.ndarray:
    from contrastlab.audit.inputs import encode_texts

    emb = encode_texts(encoder, texts, batch_size=cfg.batch_size, progress=cfg.progress, label=label)
    return emb.double().norm(dim=1).numpy()


def measure(
    encoder: Any,
    words: WordSet | None,
    *,
    query_texts: list[str] | None,
    query_norms: np.ndarray,
    correct_top1: np.ndarray,
    softmax_top1: np.ndarray,
    cfg: AuditConfig,
    rng: np.random.Generator,
) -> NormClaims:
    """Embed the word list and the specificity pairs with ``encoder`` and assess the three claims.

    Args:
        encoder: the audit's text model (``None`` for a model given as embeddings).
        words: the frequency word list (:func:`load_words`).
        query_texts: the audited queries' texts (``None`` without text).
        query_norms: ``(Q,)`` their pre-normalisation norms.
        correct_top1: ``(Q,)`` 0/1, the query's document ranked first.
        softmax_top1: ``(Q,)`` the softmax search's probability of the first-ranked document.
        cfg: the audit's config (batch size, bootstrap resamples, progress).
        rng: the audit's generator (bootstraps).
    """
    from contrastlab.audit.hypernyms import HYPERNYM_PAIRS
    from contrastlab.audit.word_lists import token_counts, zipf_frequencies

    query_norms = np.asarray(query_norms, dtype=np.float64)
    if _constant(query_norms):
        uncertainty = _not_measured("uncertainty", "norms are constant")
    else:
        uncertainty = _assess_uncertainty(query_norms, softmax_top1, correct_top1, n_boot=cfg.n_boot, rng=rng)
    if encoder is None or words is None:
        why = "no text model: the model is given as embeddings"
        return NormClaims(
            claims={
                "frequency": _not_measured("frequency", why),
                "specificity": _not_measured("specificity", why),
                "uncertainty": uncertainty,
            },
            queries_frequency=None,
            words=None,
        )
    word_norms = _embed_norms(encoder, words.texts, cfg, "words")
    frequency, word_data = _frequency_on(word_norms, words.texts, words.zipf, encoder, cfg, rng)

    specific, general = [s for s, _ in HYPERNYM_PAIRS], [g for _, g in HYPERNYM_PAIRS]
    pair_norms = _embed_norms(encoder, specific + general, cfg, "specificity pairs")
    ns, ng = pair_norms[: len(specific)], pair_norms[len(specific) :]
    pair_data = None
    if _constant(pair_norms):
        specificity = _not_measured("specificity", "norms are constant")
    else:
        toks = token_counts(encoder, specific + general).astype(np.float64)
        zipf, _ = zipf_frequencies(specific + general)
        chars = (np.array([len(w) for w in specific], float), np.array([len(w) for w in general], float))
        tokens = (toks[: len(specific)], toks[len(specific) :])
        specificity = assess_specificity(
            ns,
            ng,
            chars=chars,
            tokens=tokens,
            zipf=(zipf[: len(specific)], zipf[len(specific) :]),
            n_boot=cfg.n_boot,
            rng=rng,
        )
        pair_data = {
            "log_ratio": np.log(ns) - np.log(ng),
            "delta_chars": chars[0] - chars[1],
            "delta_tokens": tokens[0] - tokens[1],
        }
    queries_frequency = None
    if query_texts is not None:
        q_zipf, _ = zipf_frequencies(query_texts)
        queries_frequency, _ = _frequency_on(query_norms, query_texts, q_zipf, encoder, cfg, rng)
    return NormClaims(
        claims={"frequency": frequency, "specificity": specificity, "uncertainty": uncertainty},
        queries_frequency=queries_frequency,
        words=words.provenance,
        word_data=word_data,
        pair_data=pair_data,
    )


def _fmt(e: Estimate) -> str:
    return f"{e.value:+.3f} [{e.low:+.3f}, {e.high:+.3f}]" if np.isfinite(e.value) else "n/a"


def section(found: NormClaims) -> dict[str, Any]:
    """The report's section on the claims: a table, a summary sentence, metrics and the results.json entry.

    Returns:
        ``{"table", "summary", "metrics", "results"}``.
    """
    rows: list[list[Any]] = []

    def add(label: str, c: ClaimResult) -> None:
        e = c.estimate
        rows.append([label, c.statistic, e.value, e.low, e.high, e.n, c.null, c.verdict])
        for key, d in c.details.items():
            null = 0.5 if key in ("sign_fraction", "auroc_softmax") else c.null
            rows.append(["", _DETAILS.get(key, key), d.value, d.low, d.high, d.n, null, ""])

    for name in CLAIMS:
        add(name, found.claims[name])
    if found.queries_frequency is not None:
        add("frequency, audited queries", found.queries_frequency)
    table = {
        "title": "The norm paper's claims (Su, Ren & Veitch 2026) on this model: 95% bootstrap intervals; "
        "shown = the interval excludes the null on the predicted side (ρ > 0, Δ > 0, AUROC > 0.5)",
        "columns": ["claim", "statistic", "value", "low", "high", "n", "null", "verdict"],
        "rows": rows,
    }
    parts = []
    for name in CLAIMS:
        c = found.claims[name]
        parts.append(f"{name} {c.verdict}" + (f" ({_fmt(c.estimate)})" if c.verdict != "not measured" else ""))
    summary = "The norm paper's claims on this model: " + "; ".join(parts) + "."
    metrics = {f"norm_claim_{name}": found.claims[name].estimate.value for name in CLAIMS}
    metrics.update({f"norm_claim_{name}_low": found.claims[name].estimate.low for name in CLAIMS})
    metrics.update({f"norm_claim_{name}_high": found.claims[name].estimate.high for name in CLAIMS})
    results = {
        "paper": "Su, Ren & Veitch (2026), arXiv 2606.30625",
        "predicted": dict(PREDICTED),
        "rule": "shown: the 95% interval excludes the null on the predicted side; opposite: on the other side; "
        "not shown: it contains the null",
        "summary": summary,
        "claims": {name: asdict(found.claims[name]) for name in CLAIMS},
        "queries_frequency": asdict(found.queries_frequency) if found.queries_frequency is not None else None,
        "words": found.words,
    }
    return {"table": table, "summary": summary, "metrics": metrics, "results": results}
