"""The compression audit: what truncating and quantizing the embeddings does to the search the model was trained to be.

For each prefix width d (the full width D and 256, 128, 64, 32 where smaller) and each storage, the documents
are cut to their first d coordinates, renormalised (as the Matryoshka losses see them) and stored as

================  ==========================================================================================
``float32``       the unit prefix vectors (``faiss.IndexFlatIP``): score q̂·d̂, 4d bytes per vector
``int8``          faiss's scalar quantizer (``IndexScalarQuantizer``, ``QT_8bit``: 255 levels per dimension
                  between the documents' minimum and maximum): score q̂·dec(d̂), d bytes
``binary``        the sign bits ``packbits(d̂ > 0)`` (sentence-transformers' ``quantize_embeddings(...,
                  "ubinary")``), searched by Hamming distance (``IndexBinaryFlat``): score
                  (sign q̂ · sign d̂)/d = 1 − 2·hamming/d, d/8 bytes
``binary_rescore``  the same, with the ``rescore_depth`` nearest by Hamming rescored by q̂·d̂ in float32 (the
                  float vectors read only for those candidates): d/8 bytes in the index
``pq``            faiss's product quantizer (``IndexPQ``: d/``pq_dsub`` sub-vectors of ``pq_bits`` bits, trained
                  on the documents): score q̂·dec(d̂) (asymmetric distance), d·pq_bits/(8·pq_dsub) bytes
================  ==========================================================================================

Queries stay float32 (asymmetric search) except for ``binary``, which compares sign bits. Each setting gets

* retrieval — R@k, MRR, nDCG@10 per query with 95% t-intervals, and paired against the full-width float32
  model over the same queries (the mean per-query difference with its interval). Ties (frequent between
  Hamming distances and between documents with the same PQ code) are broken at random in expectation: a
  relevant document tied with t others after g better ones has each rank g+1 … g+1+t with probability
  1/(t+1);
* the softmax-search view at temperature τ — the cross-entropy CE(p, p_c) = −Σ_j p_j log p_c,j between the
  full model's search distribution p = softmax(q̂·d̂/τ) over the whole corpus and the compressed one p_c, its
  KL part CE − H(p), and the error log Z_c − log Z of the log-partition, all streamed over blocks of
  documents (memory O(Q·block), the corpus never scored at once);
* bytes per vector, and the query latency of its faiss index (search of every query for the top k_max,
  rescoring included), measured in the same run.

Not a figure of merit by itself: :func:`plot_compression` draws quality against bytes per vector, one curve
per storage, the full model marked.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from contrastlab.eval.probe import MeanCI, mean_ci

__all__ = [
    "STORAGES",
    "CompressionRow",
    "CompressionResult",
    "binary_codes",
    "compression_audit",
    "default_widths",
    "plot_compression",
    "pq_min_documents",
]

STORAGES = ("float32", "int8", "binary", "binary_rescore", "pq")
"""The storages audited, in the order of the table."""

_WIDTHS = (256, 128, 64, 32)
_PQ_MIN_POINTS = 39
"""faiss's k-means wants at least 39 training points per centroid (it warns below); a product quantizer of b
bits has 2^b centroids per sub-quantizer, so it is trained only on at least 39·2^b documents."""


@dataclass(frozen=True)
class CompressionRow:
    """One (width, storage) setting of the audit.

    Attributes:
        width: the prefix width d.
        storage: a name of :data:`STORAGES`.
        bytes_per_vector: the index's bytes per document.
        latency_ms: wall-clock milliseconds per query of the index's search (top k_max), measured here.
        metrics: ``recall@k``, ``mrr``, ``ndcg@10`` → mean with 95% interval over queries.
        paired: the same names → the mean per-query difference from the full-width float32 setting.
        cross_entropy: CE(p, p_c) in nats, per query.
        kl: CE(p, p_c) − H(p) ≥ 0, per query.
        log_partition_error: log Z_c − log Z, per query.
        note: how the setting was built (PQ's sub-quantizers and bits).
    """

    width: int
    storage: str
    bytes_per_vector: float
    latency_ms: float
    metrics: dict[str, MeanCI]
    paired: dict[str, MeanCI]
    cross_entropy: MeanCI
    kl: MeanCI
    log_partition_error: MeanCI
    note: str = ""


@dataclass(frozen=True)
class CompressionResult:
    """Every setting of one audit, the full-width float32 one first."""

    rows: list[CompressionRow]
    temperature: float
    num_queries: int
    num_documents: int
    skipped: list[str] = field(default_factory=list)
    """settings not run, with the reason (a PQ that cannot be trained on this many documents)"""

    def table(self) -> dict[str, Any]:
        """A ``results.json`` table (title, columns, rows)."""
        names = list(self.rows[0].metrics)
        cols = ["width", "storage", "bytes/vector", "latency ms/query", *names, *(f"Δ{n}" for n in names)]
        cols += ["CE(p, p_c)", "KL", "log Z error"]
        rows = [
            [r.width, r.storage, r.bytes_per_vector, r.latency_ms]
            + [r.metrics[n].mean for n in names]
            + [r.paired[n].mean for n in names]
            + [r.cross_entropy.mean, r.kl.mean, r.log_partition_error.mean]
            for r in self.rows
        ]
        return {"title": f"Compression: width × storage (τ = {self.temperature:g})", "columns": cols, "rows": rows}


def binary_codes(x: np.ndarray) -> np.ndarray:
    """The sign bits of each row, packed 8 to a byte: ``(N, d)`` → ``(N, ⌈d/8⌉)`` uint8 (a coordinate > 0 is a 1).

    The same codes as sentence-transformers' ``quantize_embeddings(x, precision="ubinary")``.
    """
    return np.packbits(np.asarray(x) > 0, axis=-1)


def default_widths(dim: int) -> tuple[int, ...]:
    """The full width ``dim`` and each of 256, 128, 64, 32 smaller than it, decreasing."""
    return (dim, *(w for w in _WIDTHS if w < dim))


@dataclass
class _Setting:
    """A storage at one width: how queries and documents are scored, and its index for the latency."""

    width: int
    storage: str
    q_side: Tensor  # (Q, d) float64
    d_side: Tensor  # (M, d) float64: score = q_side @ d_side.T
    bytes_per_vector: float
    search: Any  # () -> None: the index's search of every query (timed)
    rescore: Tensor | None = None  # (Q, R) candidate documents rescored in float32 (binary_rescore)
    note: str = ""
    scale: float = 1.0  # applied after the product: binary sums of ±1 stay exact integers in any order


def _check_inputs(queries: Tensor, documents: Tensor, relevant: np.ndarray) -> np.ndarray:
    for name, x in (("queries", queries), ("documents", documents)):
        if not isinstance(x, Tensor) or x.ndim != 2 or x.shape[0] < 1 or not x.is_floating_point():
            raise ValueError(f"{name} must be a non-empty (N, D) floating-point tensor")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} contains NaN or Inf")
    if queries.shape[1] != documents.shape[1]:
        raise ValueError(f"documents must have D = {queries.shape[1]} like queries, got {documents.shape[1]}")
    rel = np.asarray(relevant)
    if rel.shape != (queries.shape[0],) or rel.dtype.kind not in "iu":
        raise ValueError(f"relevant must be ({queries.shape[0]},) integer document positions, got {rel.shape}")
    if rel.size and (rel.min() < 0 or rel.max() >= documents.shape[0]):
        raise ValueError(
            f"relevant must index the {documents.shape[0]} documents, got values in [{rel.min()}, {rel.max()}]"
        )
    return rel.astype(np.int64)


def pq_min_documents(bits: int) -> int:
    """The fewest documents a ``bits``-bit product quantizer is trained on here: 39·2^bits (see above)."""
    return _PQ_MIN_POINTS * 2**bits


def _pq_bits(n_docs: int, pq_bits: int | None) -> int | None:
    """The explicit ``pq_bits`` if trainable on ``n_docs`` documents, else the largest of 8, 6, 4 that is.

    Raises:
        ValueError: an explicit ``pq_bits`` outside [1, 16] or with too few documents to train it.
    """
    if pq_bits is not None:
        if isinstance(pq_bits, bool) or not isinstance(pq_bits, int) or not 1 <= pq_bits <= 16:
            raise ValueError(f"pq_bits must be an int in [1, 16], got {pq_bits!r}")
        if n_docs < pq_min_documents(pq_bits):
            raise ValueError(
                f"pq_bits: a {pq_bits}-bit product quantizer needs at least {_PQ_MIN_POINTS} × 2^{pq_bits} = "
                f"{pq_min_documents(pq_bits)} documents to train on, got {n_docs}"
            )
        return pq_bits
    return next((b for b in (8, 6, 4) if n_docs >= pq_min_documents(b)), None)


def _settings(
    q_full: np.ndarray,
    d_full: np.ndarray,
    width: int,
    storages: tuple[str, ...],
    k_max: int,
    rescore_depth: int,
    pq_dsub: int,
    pq_bits: int | None,
    skipped: list[str],
) -> list[_Setting]:
    import faiss

    q = np.ascontiguousarray(q_full[:, :width], dtype=np.float32)
    d = np.ascontiguousarray(d_full[:, :width], dtype=np.float32)
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), np.finfo(np.float32).tiny)
    d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), np.finfo(np.float32).tiny)
    q64, d64 = torch.from_numpy(q).double(), torch.from_numpy(d).double()
    out: list[_Setting] = []
    for storage in storages:
        if storage == "float32":
            flat = faiss.IndexFlatIP(width)
            flat.add(d)
            out.append(_Setting(width, storage, q64, d64, 4.0 * width, lambda i=flat: i.search(q, k_max)))
        elif storage == "int8":
            sq = faiss.IndexScalarQuantizer(width, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            sq.train(d)
            sq.add(d)
            decoded = torch.from_numpy(_decoded(sq, d.shape[0])).double()
            out.append(
                _Setting(width, storage, q64, decoded, float(sq.sa_code_size()), lambda i=sq: i.search(q, k_max))
            )
        elif storage in ("binary", "binary_rescore"):
            if width % 8:
                skipped.append(f"{storage} at width {width}: faiss's binary index needs a width divisible by 8")
                continue
            codes_d, codes_q = binary_codes(d), binary_codes(q)
            binary = faiss.IndexBinaryFlat(width)
            binary.add(codes_d)
            sign_q = torch.from_numpy(np.where(q > 0, 1.0, -1.0))
            sign_d = torch.from_numpy(np.where(d > 0, 1.0, -1.0))
            # both binary storages score by the signs (±1 sums scaled by 1/width) and store width/8 bytes
            binary_setting = functools.partial(_Setting, width, storage, sign_q, sign_d, width / 8, scale=1.0 / width)
            if storage == "binary":
                out.append(binary_setting(lambda i=binary, c=codes_q: i.search(c, k_max)))
                continue
            depth = min(rescore_depth, d.shape[0])
            candidates = torch.from_numpy(binary.search(codes_q, depth)[1].astype(np.int64))

            def search(i: Any = binary, depth: int = depth, codes: np.ndarray = codes_q) -> None:
                _, ids = i.search(codes, depth)
                rescored = np.einsum("qd,qrd->qr", q, d[ids])  # the float vectors of the candidates only
                np.argsort(-rescored, axis=1)[:, :k_max]

            out.append(binary_setting(search, candidates, f"top {depth} by Hamming rescored"))
        elif storage == "pq":
            if width % pq_dsub:
                skipped.append(f"pq at width {width}: not divisible into sub-vectors of pq_dsub = {pq_dsub}")
                continue
            bits = _pq_bits(d.shape[0], pq_bits)
            if bits is None:
                skipped.append(f"pq: {d.shape[0]} documents are too few to train even a 4-bit product quantizer")
                continue
            pq = faiss.IndexPQ(width, width // pq_dsub, bits, faiss.METRIC_INNER_PRODUCT)
            pq.train(d)
            pq.add(d)
            decoded = torch.from_numpy(_decoded(pq, d.shape[0])).double()
            note = f"{width // pq_dsub} sub-quantizers × {bits} bits"
            out.append(
                _Setting(
                    width, storage, q64, decoded, float(pq.sa_code_size()), lambda i=pq: i.search(q, k_max), note=note
                )
            )
        else:
            raise ValueError(f"storages: unknown storage {storage!r}; known: {', '.join(STORAGES)}")
    return out


_TIE = 1e-9
"""Scores within this of the relevant document's count as tied with it: every score is a cosine-scale number
(|s| ≤ 1 up to quantization error) computed in float64, so a mathematical tie (two documents with the same
int8, PQ or binary code) can differ by rounding (~1e-16) between the blocked product and the relevant row's
own; two distinct scores closer than 1e-9 are a tie for any practical ranking."""

_CANDIDATE_LIFT = 4.0
"""Added to a rescored candidate's score for ranking only: every score lies in [−1, 1], so the rescored
candidates rank first (in their float order) and the rest follow in Hamming order, as the search returns them."""


def _scores(s: _Setting, float_q: Tensor, float_d: Tensor, j0: int, j1: int) -> tuple[Tensor, Tensor]:
    """``(scores, ranking scores)`` of every query against documents ``j0:j1`` (rescored candidates in float)."""
    out = s.q_side @ s.d_side[j0:j1].T
    if s.scale != 1.0:
        out = out * s.scale
    if s.rescore is None:
        return out, out
    cand = (s.rescore >= j0) & (s.rescore < j1)
    rows = torch.nonzero(cand, as_tuple=True)[0]
    cols = s.rescore[cand]
    out[rows, cols - j0] = (float_q[rows] * float_d[cols]).sum(1)
    ranking = out.clone()
    ranking[rows, cols - j0] += _CANDIDATE_LIFT
    return out, ranking


def _rank_metrics(greater: Tensor, ties: Tensor, ks: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Expected R@k, MRR and nDCG@10 of the relevant document under random tie-breaking, per query."""
    out: dict[str, list[float]] = {**{f"recall@{k}": [] for k in ks}, "mrr": [], "ndcg@10": []}
    for g, t in zip(greater.tolist(), ties.tolist(), strict=True):
        ranks = np.arange(g + 1, g + t + 2, dtype=np.float64)  # each equally likely
        for k in ks:
            out[f"recall@{k}"].append(float((ranks <= k).mean()))
        out["mrr"].append(float((1.0 / ranks).mean()))
        out["ndcg@10"].append(float(np.where(ranks <= 10, 1.0 / np.log2(ranks + 1), 0.0).mean()))
    return {k: np.asarray(v) for k, v in out.items()}


def compression_audit(
    queries: Tensor,
    documents: Tensor,
    relevant: np.ndarray,
    *,
    widths: tuple[int, ...] | None = None,
    storages: tuple[str, ...] = STORAGES,
    ks: tuple[int, ...] = (1, 10),
    temperature: float = 0.05,
    rescore_depth: int = 100,
    pq_dsub: int = 8,
    pq_bits: int | None = None,
    block: int = 4096,
) -> CompressionResult:
    """Audit every (prefix width × storage) setting of a model's embeddings against its full-width float32 search.

    Args:
        queries: ``(Q, D)`` query embeddings (raw: each prefix is renormalised here).
        documents: ``(M, D)`` document embeddings, the corpus searched.
        relevant: ``(Q,)`` the position of each query's relevant document in ``documents``.
        widths: prefix widths to audit, each in [1, D] (default :func:`default_widths`); D is always
            audited (the reference).
        storages: names of :data:`STORAGES`; ``float32`` is always audited (the reference).
        ks: the k of R@k.
        temperature: τ of the softmax search (the audit fits τ*; pass it).
        rescore_depth: candidates rescored in float by ``binary_rescore``.
        pq_dsub: coordinates per PQ sub-vector (the width must be divisible by it, else PQ skips that width).
        pq_bits: bits per PQ code (default: 8, 6 or 4, the largest trainable on M documents).
        block: documents scored at once in the streamed passes.

    Returns:
        The settings, the full-width float32 one first; each row's ``paired`` is relative to it.

    Raises:
        ValueError: inputs of the wrong shape or with NaN, a width outside [1, D], an unknown storage,
            ``temperature`` ≤ 0, an explicit ``pq_bits`` that cannot be trained on M documents (naming it).
    """
    rel = _check_inputs(queries, documents, relevant)
    dim = queries.shape[1]
    ws = default_widths(dim) if widths is None else tuple(sorted({dim, *widths}, reverse=True))
    if any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= dim for w in ws):
        raise ValueError(f"widths must be ints in [1, {dim}], got {list(widths or ())}")
    unknown = [s for s in storages if s not in STORAGES]
    if unknown:
        raise ValueError(f"storages: unknown storage {unknown[0]!r}; known: {', '.join(STORAGES)}")
    sts = ("float32", *(s for s in STORAGES if s in storages and s != "float32"))
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature!r}")
    for name, value in (("rescore_depth", rescore_depth), ("pq_dsub", pq_dsub), ("block", block)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    ks = tuple(sorted({k for k in ks if 1 <= k})) or (1,)
    k_max = min(max(max(ks), 10), documents.shape[0])
    if pq_bits is not None:
        _pq_bits(documents.shape[0], pq_bits)  # refuse an untrainable explicit choice before any work

    q_np = queries.detach().cpu().double().numpy()
    d_np = documents.detach().cpu().double().numpy()
    skipped: list[str] = []
    settings = [s for w in ws for s in _settings(q_np, d_np, w, sts, k_max, rescore_depth, pq_dsub, pq_bits, skipped)]
    floats = {s.width: (s.q_side, s.d_side) for s in settings if s.storage == "float32"}
    ref_q, ref_d = floats[dim]
    inv_t = 1.0 / temperature
    n_q, n_docs = queries.shape[0], documents.shape[0]

    # each setting's score of the relevant document, and the streamed accumulators
    rel_t = torch.from_numpy(rel)
    rel_score = []
    for s in settings:
        fq, fd = floats[s.width]
        full = (s.q_side * s.d_side[rel_t]).sum(1)
        if s.scale != 1.0:
            full = full * s.scale
        if s.rescore is not None:
            hit = (s.rescore == rel_t[:, None]).any(1)
            full = torch.where(hit, (fq * fd[rel_t]).sum(1) + _CANDIDATE_LIFT, full)
        rel_score.append(full)  # the ranking score
    greater = [torch.zeros(n_q, dtype=torch.long) for _ in settings]
    ties = [torch.zeros(n_q, dtype=torch.long) for _ in settings]
    m_ref = torch.full((n_q,), -math.inf, dtype=torch.float64)
    z_ref = torch.zeros(n_q, dtype=torch.float64)  # Σ exp(s/τ − m_ref)
    e_ref = torch.zeros(n_q, dtype=torch.float64)  # Σ exp(s/τ − m_ref)·s/τ
    lse_c = [torch.full((n_q,), -math.inf, dtype=torch.float64) for _ in settings]
    e_c = [torch.zeros(n_q, dtype=torch.float64) for _ in settings]  # Σ exp(s/τ − m_ref)·s_c/τ
    for j0 in range(0, n_docs, block):
        j1 = min(n_docs, j0 + block)
        ref = (ref_q @ ref_d[j0:j1].T) * inv_t  # (Q, b) the full model's logits
        m_new = torch.maximum(m_ref, ref.max(1).values)
        scale = torch.exp(m_ref - m_new)
        w = torch.exp(ref - m_new[:, None])
        z_ref = z_ref * scale + w.sum(1)
        e_ref = e_ref * scale + (w * ref).sum(1)
        for i, s in enumerate(settings):
            fq, fd = floats[s.width]
            sc, ranking = _scores(s, fq, fd, j0, j1)
            e_c[i] = e_c[i] * scale + (w * sc).sum(1) * inv_t
            lse_c[i] = torch.logaddexp(lse_c[i], torch.logsumexp(sc * inv_t, 1))
            own = torch.nonzero((rel_t >= j0) & (rel_t < j1), as_tuple=True)[0]
            others = ranking.clone() if s.rescore is None else ranking
            others[own, rel_t[own] - j0] = -math.inf  # the relevant document is neither above nor tied with itself
            diff = others - rel_score[i][:, None]
            greater[i] += (diff > _TIE).sum(1)
            ties[i] += (diff.abs() <= _TIE).sum(1)
        m_ref = m_new
    log_z = m_ref + torch.log(z_ref)
    entropy = log_z - e_ref / z_ref

    rows: list[CompressionRow] = []
    reference: dict[str, np.ndarray] = {}
    for i, s in enumerate(settings):
        per = _rank_metrics(greater[i], ties[i], ks)
        if not reference:
            reference = per
        ce = lse_c[i] - e_c[i] / z_ref
        t0 = time.perf_counter()
        s.search()
        latency = 1e3 * (time.perf_counter() - t0) / n_q
        rows.append(
            CompressionRow(
                width=s.width,
                storage=s.storage,
                bytes_per_vector=s.bytes_per_vector,
                latency_ms=latency,
                metrics={k: mean_ci(v.tolist()) for k, v in per.items()},
                paired={k: mean_ci((v - reference[k]).tolist()) for k, v in per.items()},
                cross_entropy=mean_ci(ce.tolist()),
                kl=mean_ci((ce - entropy).tolist()),
                log_partition_error=mean_ci((lse_c[i] - log_z).tolist()),
                note=s.note,
            )
        )
    return CompressionResult(rows, float(temperature), n_q, n_docs, skipped)


def _decoded(index: Any, n: int) -> np.ndarray:
    """The ``n`` stored vectors of a quantizing faiss index as decoded float32, ``(n, d)``.

    The output buffer is passed explicitly: with ``faiss.contrib.torch_utils`` imported (by any package in
    the process) ``reconstruct_n`` otherwise returns a torch tensor instead of a numpy array.
    """
    out = np.empty((n, index.d), dtype=np.float32)
    index.reconstruct_n(0, n, out)
    return out


def plot_compression(result: CompressionResult, path: str | Path, metric: str = "recall@1") -> Path:
    """Quality against bytes per vector, one curve per storage (widths along it), the full model marked.

    A PNG written atomically (:func:`contrastlab.figures.save_png`); returns ``path``.

    Raises:
        ValueError: ``metric`` is not one of the result's metrics.
    """
    from contrastlab.figures import save_png, subplots

    if metric not in result.rows[0].metrics:
        raise ValueError(f"metric must be one of {', '.join(result.rows[0].metrics)}, got {metric!r}")
    fig, ax = subplots(figsize=(6.4, 4.2))
    for storage in STORAGES:
        rows = sorted((r for r in result.rows if r.storage == storage), key=lambda r: r.bytes_per_vector)
        if not rows:
            continue
        x = [r.bytes_per_vector for r in rows]
        y = [r.metrics[metric].mean for r in rows]
        err = [
            [r.metrics[metric].mean - r.metrics[metric].low for r in rows],
            [r.metrics[metric].high - r.metrics[metric].mean for r in rows],
        ]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=2, label=storage)
        for r in rows:
            ax.annotate(
                str(r.width),
                (r.bytes_per_vector, r.metrics[metric].mean),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    full = result.rows[0]
    ax.scatter(
        [full.bytes_per_vector],
        [full.metrics[metric].mean],
        s=160,
        facecolors="none",
        edgecolors="k",
        zorder=5,
        label=f"full model ({full.width}-d float32)",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per vector (log scale)")
    ax.set_ylabel(f"{metric} (95% interval)")
    ax.set_title(f"Compression: {result.num_queries} queries, {result.num_documents} documents; numbers are widths")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    save_png(fig, out, dpi=120)
    return out
