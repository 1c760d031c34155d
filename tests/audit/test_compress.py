"""The compression audit against brute force: full score matrices in numpy, faiss's own indexes as oracles.

Sizes are small enough to hold every (query, document) score; the audit streams them in blocks of 37
documents, so the streamed sums (log-partitions, the cross-entropy) are checked against the one-shot ones
to float64 rounding (1e-9 relative), and the retrieval metrics — counts of scores above and equal to the
relevant one — exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

faiss = pytest.importorskip("faiss")

from contrastlab.audit.compress import (  # noqa: E402
    STORAGES,
    binary_codes,
    compression_audit,
    default_widths,
    plot_compression,
)
from tests._fresh_python import run_fresh  # noqa: E402

Q, M, D, TAU = 40, 700, 32, 0.1


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(Q, D, generator=g, dtype=torch.float64) * (1 + torch.rand(Q, 1, generator=g, dtype=torch.float64))
    docs = torch.randn(M, D, generator=g, dtype=torch.float64)
    rel = torch.randperm(M, generator=g)[:Q].numpy()
    docs[rel] = q + 0.9 * torch.randn(Q, D, generator=g, dtype=torch.float64)
    return q, docs, rel


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _expected(scores: np.ndarray, rel: np.ndarray) -> dict[str, float]:
    """R@1, R@10 and MRR with random tie-breaking, by a loop over queries."""
    out = {"recall@1": 0.0, "recall@10": 0.0, "mrr": 0.0}
    for i, r in enumerate(rel):
        s = scores[i]
        g = int((np.delete(s, r) > s[r]).sum())
        t = int((np.delete(s, r) == s[r]).sum())
        ranks = np.arange(g + 1, g + t + 2)
        out["recall@1"] += (ranks <= 1).mean() / len(rel)
        out["recall@10"] += (ranks <= 10).mean() / len(rel)
        out["mrr"] += (1.0 / ranks).mean() / len(rel)
    return out


def _softmax_view(full: np.ndarray, comp: np.ndarray) -> dict[str, float]:
    """CE(p, p_c), KL and the log-partition error from the full score matrices (float64)."""
    lf, lc = full / TAU, comp / TAU
    zf = np.log(np.exp(lf - lf.max(1, keepdims=True)).sum(1)) + lf.max(1)
    zc = np.log(np.exp(lc - lc.max(1, keepdims=True)).sum(1)) + lc.max(1)
    p = np.exp(lf - zf[:, None])
    ce = -(p * (lc - zc[:, None])).sum(1)
    h = -(p * (lf - zf[:, None])).sum(1)
    return {"ce": ce.mean(), "kl": (ce - h).mean(), "logz": (zc - zf).mean()}


@pytest.fixture(scope="module")
def audited():
    q, docs, rel = _data()
    return (
        q,
        docs,
        rel,
        compression_audit(q, docs, rel, widths=(16,), ks=(1, 10), temperature=TAU, block=37, rescore_depth=20),
    )


def _row(result, width: int, storage: str):
    return next(r for r in result.rows if r.width == width and r.storage == storage)


def _oracle_scores(storage: str, q: np.ndarray, docs: np.ndarray, width: int) -> np.ndarray:
    """Every query's score of every document under ``storage``, from faiss's own encode/decode."""
    qu, du = _unit(q[:, :width]), _unit(docs[:, :width])
    if storage == "float32":
        return qu.astype(np.float64) @ du.astype(np.float64).T
    if storage in ("int8", "pq"):
        index = (
            faiss.IndexScalarQuantizer(width, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            if storage == "int8"
            else faiss.IndexPQ(
                width, width // 8, 4, faiss.METRIC_INNER_PRODUCT
            )  # 700 docs: 4 bits (39·16 ≤ 700 < 39·64)
        )
        index.train(du)
        decoded = index.sa_decode(index.sa_encode(du))
        return qu.astype(np.float64) @ decoded.astype(np.float64).T
    bits_q = np.unpackbits(binary_codes(qu), axis=1)[:, :width].astype(np.int64)
    bits_d = np.unpackbits(binary_codes(du), axis=1)[:, :width].astype(np.int64)
    hamming = (bits_q[:, None, :] != bits_d[None, :, :]).sum(2)
    return 1.0 - 2.0 * hamming / width


def test_binary_codes_are_sentence_transformers_ubinary() -> None:
    quantization = pytest.importorskip("sentence_transformers.util.quantization")
    x = np.random.default_rng(0).normal(size=(9, 24)).astype(np.float32)
    assert np.array_equal(binary_codes(x), quantization.quantize_embeddings(x, precision="ubinary"))


@pytest.mark.parametrize("storage", ["float32", "int8", "binary", "pq"])
@pytest.mark.parametrize("width", [D, 16])
def test_each_storage_equals_brute_force(audited, storage: str, width: int) -> None:
    q, docs, rel, result = audited
    row = _row(result, width, storage)
    scores = _oracle_scores(storage, q.numpy(), docs.numpy(), width)
    want = _expected(scores, rel)
    for name, value in want.items():
        assert row.metrics[name].mean == pytest.approx(value, abs=1e-12), name
    full = _oracle_scores("float32", q.numpy(), docs.numpy(), D)
    view = _softmax_view(full, scores)
    assert row.cross_entropy.mean == pytest.approx(view["ce"], rel=1e-6)
    assert row.kl.mean == pytest.approx(view["kl"], rel=1e-6, abs=1e-9)
    assert row.log_partition_error.mean == pytest.approx(view["logz"], rel=1e-6, abs=1e-9)
    reference = _expected(full, rel)
    for name in want:
        assert row.paired[name].mean == pytest.approx(want[name] - reference[name], abs=1e-12)


def _hamming_search(audited, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The audited queries and documents cut to 16 dimensions and made unit, and faiss's search of their binary codes.

    Returns:
        ``(queries, documents, distances, ids)``: each query's ``k`` nearest documents by Hamming distance.
    """
    q, docs, _, _ = audited
    qu, du = _unit(q.numpy()[:, :16]), _unit(docs.numpy()[:, :16])
    binary = faiss.IndexBinaryFlat(16)
    binary.add(binary_codes(du))
    dist, ids = binary.search(binary_codes(qu), k)
    return qu, du, dist, ids


def test_faiss_searches_agree_with_the_scores(audited) -> None:
    q, docs, rel, result = audited
    qu, du, dist, ids = _hamming_search(audited, 5)
    hamming_scores = _oracle_scores("binary", q.numpy(), docs.numpy(), 16)
    assert np.array_equal(1.0 - 2.0 * dist / 16, np.take_along_axis(hamming_scores, ids, 1))
    pq = faiss.IndexPQ(16, 2, 4, faiss.METRIC_INNER_PRODUCT)
    pq.train(du)
    pq.add(du)
    scores, ids = pq.search(qu, 1)
    oracle = _oracle_scores("pq", q.numpy(), docs.numpy(), 16)
    assert np.allclose(scores[:, 0], oracle.max(1), atol=1e-5)  # the asymmetric distance's top score


def test_binary_rescoring_ranks_the_candidates_in_float_first(audited) -> None:
    q, docs, rel, result = audited
    qu, du, _, cand = _hamming_search(audited, 20)
    ranking = _oracle_scores("binary", q.numpy(), docs.numpy(), 16)
    floats = qu.astype(np.float64) @ du.astype(np.float64).T
    rows = np.arange(Q)[:, None]
    ranking[rows, cand] = floats[rows, cand] + 4.0  # candidates above every other document, in float order
    row = _row(result, 16, "binary_rescore")
    for name, value in _expected(ranking, rel).items():
        assert row.metrics[name].mean == pytest.approx(value, abs=1e-12), name
    assert row.bytes_per_vector == 2 and row.note == "top 20 by Hamming rescored"


def test_bytes_reference_and_the_table(audited) -> None:
    _, _, _, result = audited
    first = result.rows[0]
    assert (first.width, first.storage) == (D, "float32") and first.kl.mean == pytest.approx(0.0, abs=1e-12)
    assert first.log_partition_error.mean == pytest.approx(0.0, abs=1e-12)
    assert {(r.width, r.storage): r.bytes_per_vector for r in result.rows if r.width == 16} == {
        (16, "float32"): 64.0,
        (16, "int8"): 16.0,
        (16, "binary"): 2.0,
        (16, "binary_rescore"): 2.0,
        (16, "pq"): 1.0,  # 2 sub-quantizers × 4 bits
    }
    assert all(r.latency_ms > 0 for r in result.rows)
    table = result.table()
    assert len(table["rows"]) == 2 * len(STORAGES) and len(table["columns"]) == len(table["rows"][0])


def test_streaming_does_not_change_the_numbers() -> None:
    q, docs, rel = _data(seed=1)
    a = compression_audit(q, docs, rel, widths=(8,), storages=("float32", "int8"), temperature=TAU, block=13)
    b = compression_audit(q, docs, rel, widths=(8,), storages=("float32", "int8"), temperature=TAU, block=10_000)
    for ra, rb in zip(a.rows, b.rows, strict=True):
        assert ra.metrics["mrr"].mean == rb.metrics["mrr"].mean
        assert math.isclose(ra.cross_entropy.mean, rb.cross_entropy.mean, rel_tol=1e-9)
        assert math.isclose(ra.log_partition_error.mean, rb.log_partition_error.mean, rel_tol=1e-9, abs_tol=1e-12)


def test_defaults_and_skips() -> None:
    assert default_widths(384) == (384, 256, 128, 64, 32) and default_widths(48) == (48, 32)
    q, docs, rel = _data()
    few = compression_audit(q[:5], docs[:100], np.arange(5), widths=(12,), temperature=TAU)
    assert {r.storage for r in few.rows} == {"float32", "int8", "binary", "binary_rescore"}
    assert any("too few to train" in s for s in few.skipped) and any("width 12" in s for s in few.skipped)


def test_plot_is_written(audited, tmp_path: Path) -> None:
    path = plot_compression(audited[3], tmp_path / "compress.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="^metric must be one of"):
        plot_compression(audited[3], tmp_path / "x.png", metric="auc")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"widths": (0,)}, r"^widths must be ints in \[1, 32\]"),
        ({"widths": (33,)}, r"^widths must be ints in \[1, 32\]"),
        ({"storages": ("float16",)}, r"^storages: unknown storage 'float16'"),
        ({"temperature": 0.0}, r"^temperature must be finite and > 0"),
        ({"pq_bits": 8}, r"^pq_bits: a 8-bit product quantizer needs at least 39 × 2\^8 = 9984 documents"),
        ({"rescore_depth": 0}, r"^rescore_depth must be a positive int"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    q, docs, rel = _data()
    with pytest.raises(ValueError, match=match):
        compression_audit(q, docs, rel, **kwargs)
    with pytest.raises(ValueError, match=r"^relevant must index"):
        compression_audit(q, docs, rel + M)
    with pytest.raises(ValueError, match=r"^documents must have D = 32"):
        compression_audit(q, docs[:, :8], rel)


def test_quantized_vectors_decode_to_numpy_with_faiss_torch_utils_imported() -> None:
    """``faiss.contrib.torch_utils`` (imported by any package in the process) makes reconstruct_n return tensors."""
    code = (
        "import faiss, faiss.contrib.torch_utils, numpy as np\n"
        "from contrastlab.audit.compress import _decoded\n"
        "d = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)\n"
        "sq = faiss.IndexScalarQuantizer(16, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)\n"
        "sq.train(d); sq.add(d)\n"
        "out = _decoded(sq, 300)\n"
        "assert type(out) is np.ndarray and out.shape == (300, 16) and np.abs(out - d).max() < 0.05, out\n"
    )
    run_fresh(code)
