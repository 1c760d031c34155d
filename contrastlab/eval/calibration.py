"""The pre-normalisation embedding norm as a confidence for top-1 retrieval.

A cosine-trained encoder discards ``‖φ(x)‖`` in the loss, yet the norm carries the optimisation history
of the input (``contrastlab.eval.norms``), and Su, Ren & Veitch (2026, arXiv 2606.30625) propose it as a
"free" calibration signal for retrieval (Draganov et al., ICML 2025, arXiv 2502.09252, report smaller
norms for unexpected samples). This module measures that claim for any encoder and labelled corpus:

* correctness of top-1 cosine retrieval (label of the nearest corpus item == label of the query);
* AUROC of a score for separating correct from wrong retrievals (Mann–Whitney, ties count one half);
* expected calibration error (equal-width bins) after a monotone map fitted on a held-out split
  (isotonic regression, so the norm becomes a probability without changing its ranking);
* reliability diagrams;
* a per-query temperature derived from the norm, ``τ_q = τ · r_ref / ‖φ(q)‖`` (the vMF reading of the
  norm as a concentration), against the baseline: the max softmax probability (MSP) of the softmax
  search ``p_j = softmax_j(cos(q, c_j)/τ)`` over the corpus, taken as the probability mass of the
  top-1 item's label (``"msp"`` in the tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats
from sklearn.isotonic import IsotonicRegression
from torch import Tensor

from contrastlab import figures
from contrastlab._checks import check_embeddings, check_labels, check_positive_float, check_same_device
from contrastlab.search.softmax import log_partition

__all__ = [
    "auroc",
    "expected_calibration_error",
    "reliability_bins",
    "IsotonicMap",
    "top1_retrieval",
    "softmax_search_confidence",
    "norm_temperature",
    "ScoreCalibration",
    "CalibrationReport",
    "calibration_report",
    "plot_reliability",
]


def _vec(name: str, x: object) -> np.ndarray:
    a = np.asarray(x.detach().cpu() if isinstance(x, Tensor) else x, dtype=np.float64)
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or Inf entries")
    return a


def _binary(name: str, x: object, n: int) -> np.ndarray:
    a = _vec(name, x)
    if a.shape[0] != n:
        raise ValueError(f"{name} must have length {n}, got {a.shape[0]}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(f"{name} must hold only 0/1 (or booleans)")
    return a


def auroc(scores: np.ndarray | Tensor, correct: np.ndarray | Tensor) -> float:
    """Area under the ROC curve of ``scores`` for the positive class ``correct == 1``.

    Computed as the Mann–Whitney statistic ``P(s⁺ > s⁻) + ½ P(s⁺ = s⁻)`` from mid-ranks.

    Args:
        scores: ``(n,)`` confidence scores (higher = more confident).
        correct: ``(n,)`` 0/1 labels.

    Returns:
        AUROC in ``[0, 1]``.

    Raises:
        ValueError: ``correct`` holds a single class (AUROC is undefined).
    """
    s = _vec("scores", scores)
    y = _binary("correct", correct, s.shape[0])
    n_pos = int(y.sum())
    n_neg = y.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("correct must contain both classes (0 and 1) for AUROC")
    ranks = stats.rankdata(s)
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def reliability_bins(
    confidence: np.ndarray | Tensor, correct: np.ndarray | Tensor, *, n_bins: int = 15
) -> dict[str, np.ndarray]:
    """Equal-width bins of ``[0, 1]``: count, mean confidence and accuracy per bin.

    Bin ``b`` holds ``(b/B, (b+1)/B]``; the first bin also holds 0.

    Returns:
        ``{"lower", "upper", "count", "confidence", "accuracy"}``, each ``(n_bins,)`` (NaN for an
        empty bin's confidence and accuracy).
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    c = _vec("confidence", confidence)
    if np.any((c < 0) | (c > 1)):
        raise ValueError("confidence must lie in [0, 1]")
    y = _binary("correct", correct, c.shape[0])
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.searchsorted(edges, c, side="left") - 1, 0, n_bins - 1)
    count = np.bincount(idx, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(idx, weights=c, minlength=n_bins) / count
        acc = np.bincount(idx, weights=y, minlength=n_bins) / count
    return {"lower": edges[:-1], "upper": edges[1:], "count": count, "confidence": conf, "accuracy": acc}


def expected_calibration_error(
    confidence: np.ndarray | Tensor, correct: np.ndarray | Tensor, *, n_bins: int = 15
) -> float:
    """ECE ``= Σ_b (n_b / n) |acc_b − conf_b|`` over equal-width bins (Guo et al., ICML 2017, Eq. 3).

    Args:
        confidence: ``(n,)`` predicted probabilities of being correct, in ``[0, 1]``.
        correct: ``(n,)`` 0/1 outcomes.
        n_bins: number of equal-width bins.

    Returns:
        ECE in ``[0, 1]``.
    """
    b = reliability_bins(confidence, correct, n_bins=n_bins)
    keep = b["count"] > 0
    return float((b["count"][keep] * np.abs(b["accuracy"][keep] - b["confidence"][keep])).sum() / b["count"].sum())


class IsotonicMap:
    """Monotone (non-decreasing) map from a score to ``P(correct)``, fitted by isotonic regression.

    Scores outside the fitted range are clipped to its ends.

    Args:
        scores: ``(n,)`` scores of the calibration split.
        correct: ``(n,)`` 0/1 outcomes of the calibration split.
    """

    def __init__(self, scores: np.ndarray | Tensor, correct: np.ndarray | Tensor) -> None:
        s = _vec("scores", scores)
        y = _binary("correct", correct, s.shape[0])
        self._iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        self._iso.fit(s, y)

    def __call__(self, scores: np.ndarray | Tensor) -> np.ndarray:
        """Calibrated probabilities, shape of ``scores``."""
        return np.asarray(self._iso.predict(_vec("scores", scores)), dtype=np.float64)


def _check_retrieval(
    query: Tensor, query_labels: Tensor, corpus: Tensor, corpus_labels: Tensor
) -> tuple[Tensor, Tensor]:
    check_embeddings("query", query, ndim=2)
    check_embeddings("corpus", corpus, ndim=2)
    check_labels("query_labels", query_labels, query.shape[0])
    check_labels("corpus_labels", corpus_labels, corpus.shape[0])
    check_same_device(query=query, corpus=corpus, query_labels=query_labels, corpus_labels=corpus_labels)
    if query.shape[1] != corpus.shape[1]:
        raise ValueError(f"corpus must have dimension D = {query.shape[1]} like query, got {corpus.shape[1]}")
    return F.normalize(query.double(), dim=1), F.normalize(corpus.double(), dim=1)


def top1_retrieval(query: Tensor, query_labels: Tensor, corpus: Tensor, corpus_labels: Tensor) -> Tensor:
    """Whether the nearest corpus item (cosine) has the query's label.

    Shape:
        query ``(Q, D)``, query_labels ``(Q,)``, corpus ``(C, D)``, corpus_labels ``(C,)``; returns ``(Q,)``
        bool. Ties go to the lowest corpus index.
    """
    q, c = _check_retrieval(query, query_labels, corpus, corpus_labels)
    nn_idx = (q @ c.T).argmax(dim=1)
    return corpus_labels[nn_idx] == query_labels


def softmax_search_confidence(
    query: Tensor, corpus: Tensor, *, temperature: float | Tensor, corpus_labels: Tensor | None = None
) -> Tensor:
    """Confidence of the softmax search ``p_j ∝ exp(cos(q, c_j) / τ)`` over the corpus in its top-1 answer.

    Without labels: the max softmax probability ``max_j p_j`` (the top-1 item's probability). With
    ``corpus_labels``: the probability mass of the top-1 item's label, ``Σ_{j: y_j = y_top1} p_j`` — the
    search's probability that the top-1 label is right (otherwise the mass of a class with many corpus
    items is spread over them and ``max_j p_j`` is small even when the answer is certain).

    Args:
        query: ``(Q, D)`` raw embeddings.
        corpus: ``(C, D)`` raw embeddings.
        temperature: a float, or a ``(Q,)`` tensor of per-query temperatures.
        corpus_labels: optional ``(C,)`` int labels.

    Returns:
        ``(Q,)`` float64 confidences in ``(0, 1]``.
    """
    check_embeddings("query", query, ndim=2)
    check_embeddings("corpus", corpus, ndim=2)
    if isinstance(temperature, Tensor):
        if temperature.shape != (query.shape[0],) or not bool((temperature > 0).all()):
            raise ValueError(f"temperature must be positive of shape ({query.shape[0]},)")
        tau = temperature.double().to(query.device)[:, None]
    else:
        tau = torch.tensor(check_positive_float("temperature", temperature), dtype=torch.float64)
    qs = F.normalize(query.double(), dim=1) / tau  # (Q, D): logits = qs @ ĉᵀ, per-query τ folded in
    cn = F.normalize(corpus.double(), dim=1)
    log_z = log_partition(qs, cn, scale=1.0)  # (Q,) log Σ_j exp(cos(q, c_j)/τ)
    logits = qs @ cn.T  # (Q, C)
    if corpus_labels is None:
        return torch.exp(logits.max(dim=1).values - log_z)
    check_labels("corpus_labels", corpus_labels, corpus.shape[0])
    top_label = corpus_labels[logits.argmax(dim=1)]  # (Q,)
    p = torch.exp(logits - log_z[:, None])  # (Q, C) the search's probabilities
    return (p * (corpus_labels[None, :] == top_label[:, None])).sum(dim=1)


def norm_temperature(norms: Tensor, *, temperature: float, reference_norm: float) -> Tensor:
    """Per-query temperature ``τ_q = τ · r_ref / ‖φ(q)‖`` (a larger norm gives a sharper search).

    Args:
        norms: ``(Q,)`` pre-normalisation norms of the queries.
        temperature: base temperature ``τ`` (the training temperature).
        reference_norm: ``r_ref``, e.g. the median norm of a calibration split.

    Returns:
        ``(Q,)`` float64 temperatures.
    """
    tau = check_positive_float("temperature", temperature)
    ref = check_positive_float("reference_norm", reference_norm)
    if not bool((norms > 0).all()):
        raise ValueError("norms must be > 0")
    return tau * ref / norms.double()


@dataclass(frozen=True)
class ScoreCalibration:
    """How well one confidence score predicts top-1 correctness on the test split.

    Attributes:
        name: the score's name.
        auroc: AUROC on the test split.
        ece_raw: ECE of the raw score on the test split (``None`` if it is not a probability).
        ece_isotonic: ECE on the test split after the isotonic map fitted on the calibration split.
        bins_raw: reliability bins of the raw score (``None`` if not a probability).
        bins_isotonic: reliability bins after the map.
    """

    name: str
    auroc: float
    ece_raw: float | None
    ece_isotonic: float
    bins_raw: dict[str, np.ndarray] | None = field(repr=False)
    bins_isotonic: dict[str, np.ndarray] = field(repr=False)


@dataclass(frozen=True)
class CalibrationReport:
    """Result of :func:`calibration_report`.

    Attributes:
        accuracy: top-1 accuracy on the test split.
        n_calibration: queries in the calibration split.
        n_test: queries in the test split.
        scores: one :class:`ScoreCalibration` per score (``norm``, ``msp``, ``msp_norm_temperature``).
        reference_norm: median calibration-split norm used by the per-query temperature.
    """

    accuracy: float
    n_calibration: int
    n_test: int
    scores: list[ScoreCalibration]
    reference_norm: float

    def table(self, title: str) -> dict[str, object]:
        """A results table in the ``docs/contracts.md`` shape."""
        rows = [[s.name, s.auroc, s.ece_raw, s.ece_isotonic, self.accuracy, self.n_test] for s in self.scores]
        cols = ["score", "AUROC", "ECE raw", "ECE isotonic", "top-1 acc", "n test"]
        return {"title": title, "columns": cols, "rows": rows}


def calibration_report(
    query: Tensor,
    query_labels: Tensor,
    corpus: Tensor,
    corpus_labels: Tensor,
    *,
    temperature: float,
    calibration_fraction: float = 0.5,
    n_bins: int = 15,
    rng: np.random.Generator,
) -> CalibrationReport:
    """Norm vs max-softmax-probability as confidence for top-1 retrieval, with isotonic calibration.

    The queries are split at random into a calibration part (fits each isotonic map and the reference
    norm) and a test part (every reported number).

    Args:
        query: ``(Q, D)`` **pre-normalisation** query embeddings.
        query_labels: ``(Q,)`` int labels.
        corpus: ``(C, D)`` corpus embeddings.
        corpus_labels: ``(C,)`` int labels.
        temperature: softmax-search temperature ``τ`` (the training temperature).
        calibration_fraction: share of queries in the calibration split.
        n_bins: ECE bins.
        rng: numpy generator for the split.

    Returns:
        A :class:`CalibrationReport`.
    """
    if not 0 < calibration_fraction < 1:
        raise ValueError(f"calibration_fraction must lie in (0, 1), got {calibration_fraction}")
    correct = top1_retrieval(query, query_labels, corpus, corpus_labels).cpu().numpy().astype(np.float64)
    n = query.shape[0]
    perm = rng.permutation(n)
    n_cal = int(round(calibration_fraction * n))
    if n_cal < 2 or n - n_cal < 2:
        raise ValueError(f"query must have enough rows for both splits, got Q = {n}")
    cal, test = perm[:n_cal], perm[n_cal:]
    norms = query.double().norm(dim=1)
    ref = float(norms[torch.as_tensor(cal)].median())
    tau_q = norm_temperature(norms, temperature=temperature, reference_norm=ref)
    candidates: list[tuple[str, np.ndarray | Tensor, bool]] = [
        ("norm", norms.cpu().numpy(), False),
        ("msp", softmax_search_confidence(query, corpus, temperature=temperature, corpus_labels=corpus_labels), True),
        (
            "msp_norm_temperature",
            softmax_search_confidence(query, corpus, temperature=tau_q, corpus_labels=corpus_labels),
            True,
        ),
    ]
    out: list[ScoreCalibration] = []
    for name, score, is_prob in candidates:
        s = score.cpu().numpy() if isinstance(score, Tensor) else score
        iso = IsotonicMap(s[cal], correct[cal])
        p_test = iso(s[test])
        both = 0 < correct[test].sum() < len(test)
        out.append(
            ScoreCalibration(
                name=name,
                auroc=auroc(s[test], correct[test]) if both else float("nan"),
                ece_raw=expected_calibration_error(s[test], correct[test], n_bins=n_bins) if is_prob else None,
                ece_isotonic=expected_calibration_error(p_test, correct[test], n_bins=n_bins),
                bins_raw=reliability_bins(s[test], correct[test], n_bins=n_bins) if is_prob else None,
                bins_isotonic=reliability_bins(p_test, correct[test], n_bins=n_bins),
            )
        )
    return CalibrationReport(
        accuracy=float(correct[test].mean()), n_calibration=n_cal, n_test=len(test), scores=out, reference_norm=ref
    )


def plot_reliability(report: CalibrationReport, path: str | Path, *, title: str = "") -> None:
    """Reliability diagrams (accuracy vs confidence per bin) of every score, raw and isotonic."""
    fig, axes = figures.subplots(1, len(report.scores), figsize=(3.6 * len(report.scores), 3.4), squeeze=False)
    for ax, s in zip(axes[0], report.scores, strict=True):
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
        for label, b, marker in (("raw", s.bins_raw, "s"), ("isotonic", s.bins_isotonic, "o")):
            if b is None:
                continue
            keep = b["count"] > 0
            ax.plot(b["confidence"][keep], b["accuracy"][keep], marker=marker, ms=4, label=f"{label}")
        ax.set_title(f"{s.name}\nAUROC {s.auroc:.3f}, ECE(iso) {s.ece_isotonic:.3f}", fontsize=9)
        ax.set_xlabel("confidence")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylabel("top-1 accuracy")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)
