import json

import numpy as np
import pytest
import torch

from contrastlab.search import EmbeddingIndex, IndexFormatError
from contrastlab.search.index import as_float32_matrix
from tests._fresh_python import run_fresh


def _clustered(n=4000, d=32, centers=40, q=200, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.standard_normal((centers, d)).astype(np.float32)
    lab = rng.integers(0, centers, size=n + q)
    x = mu[lab] + 0.3 * rng.standard_normal((n + q, d)).astype(np.float32)
    return x[:n], lab[:n], x[n:]


def _brute(xq, xb, k, cosine):
    """Exact top-k in float64, after checking that float32 rounding cannot reorder it.

    faiss computes each score in float32 with error at most ``γ_D ‖q‖ ‖x‖``, ``γ_D ≈ (D + 2) u``
    (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.5, plus the rounding of
    the normalisation), ``u = 2⁻²⁴``. When every gap between consecutive exact scores among the top
    ``k + 1`` exceeds twice that, faiss's positions equal these on every machine; the check makes the
    test's data carry that guarantee instead of relying on it.
    """
    if cosine:
        xq = xq / np.linalg.norm(xq, axis=1, keepdims=True)
        xb = xb / np.linalg.norm(xb, axis=1, keepdims=True)
    s = xq.astype(np.float64) @ xb.astype(np.float64).T
    order = np.argsort(-s, axis=1, kind="stable")[:, : k + 1]
    top = np.take_along_axis(s, order, 1)
    err = (xq.shape[1] + 2) * 2.0**-24 * np.linalg.norm(xq, axis=1).max() * np.linalg.norm(xb, axis=1).max()
    assert (top[:, :-1] - top[:, 1:]).min() > 2 * err, "test data has near-ties: the ranking is not determined"
    return top[:, :k], order[:, :k]


@pytest.mark.parametrize("metric", ["cosine", "ip"])
@pytest.mark.parametrize("as_torch", [False, True])
def test_flat_search_equals_brute_force(metric, as_torch):
    rng = np.random.default_rng(1)
    xb = rng.standard_normal((700, 24)).astype(np.float32)
    xq = rng.standard_normal((50, 24)).astype(np.float32)
    index = EmbeddingIndex(24, metric=metric)
    index.add(torch.from_numpy(xb) if as_torch else xb, ids=np.arange(700) + 1000, labels=np.arange(700) % 9)
    res = index.search(torch.from_numpy(xq) if as_torch else xq, 7, batch_size=13)
    ref_s, ref_i = _brute(xq, xb, 7, metric == "cosine")
    np.testing.assert_array_equal(res.positions, ref_i)
    np.testing.assert_array_equal(res.ids, ref_i + 1000)
    np.testing.assert_array_equal(res.labels, ref_i % 9)
    np.testing.assert_allclose(res.scores, ref_s, rtol=1e-5, atol=1e-5)
    assert index.recall(xq, 7) == 1.0


def test_exclude_ids_drops_the_query_itself():
    rng = np.random.default_rng(2)
    xb = rng.standard_normal((300, 8)).astype(np.float32)
    index = EmbeddingIndex(8, metric="cosine")
    index.add(xb, ids=np.arange(300) * 3)
    res = index.search(xb[:40], 5, exclude_ids=np.arange(40) * 3)
    _, ref = _brute(xb[:40], xb, 6, True)
    assert (ref[:, 0] == np.arange(40)).all()  # each query's nearest item is itself
    np.testing.assert_array_equal(res.positions, ref[:, 1:])
    # a query that is not in the corpus keeps its k best
    other = index.search(xb[:40], 5, exclude_ids=np.full(40, -7))
    np.testing.assert_array_equal(other.positions, ref[:, :5])


@pytest.mark.parametrize(
    "kind, knobs", [("ivf", {"nlist": 40, "nprobe": 8}), ("hnsw", {"hnsw_m": 16, "ef_search": 64})]
)
def test_approximate_indexes_report_high_recall_on_clustered_data(kind, knobs):
    xb, lab, xq = _clustered()
    index = EmbeddingIndex(32, metric="cosine", kind=kind, **knobs)
    index.add(xb, labels=lab)
    recall = index.recall(xq, 10)
    assert 0.9 <= recall <= 1.0, recall
    if kind == "hnsw":  # deeper than ef_search: HNSW is searched with k candidates, never short
        assert index.search(xq[:5], 300).ids.shape == (5, 300)
    if kind == "ivf":  # more probes, more recall; all cells visited is exact
        index.nprobe = 1
        low = index.recall(xq, 10)
        assert low <= recall  # measured 0.9545 <= 1.0: far apart, not a near thing
        index.nprobe = 40
        # Exact search, but the data has float32-level ties at the 10th place (gaps down to 4e-8), which
        # IVF's and the flat index's kernels may break differently: compare the top-10 scores, which
        # rounding moves by at most γ_D = (D + 2) u for unit vectors, not the positions.
        exact = EmbeddingIndex(32, metric="cosine")
        exact.add(xb)
        tol = 2 * (32 + 2) * 2.0**-24
        np.testing.assert_allclose(index.search(xq, 10).scores, exact.search(xq, 10).scores, rtol=0, atol=tol)


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_save_load_round_trip(tmp_path, kind):
    xb, lab, xq = _clustered(n=1000, q=20)
    index = EmbeddingIndex(32, metric="ip", kind=kind, nlist=16 if kind == "ivf" else None, nprobe=4, ef_search=50)
    index.add(xb[:600], ids=np.arange(600) + 5, labels=lab[:600])
    index.add(xb[600:], ids=np.arange(600, 1000) + 5, labels=lab[600:])
    before = index.search(xq, 10)
    index.save(tmp_path / "idx")
    loaded = EmbeddingIndex.load(tmp_path / "idx")
    assert (loaded.dim, loaded.metric, loaded.kind, loaded.ntotal) == (32, "ip", kind, 1000)
    assert (loaded.nprobe, loaded.ef_search) == (4, 50)
    after = loaded.search(xq, 10)
    np.testing.assert_array_equal(after.ids, before.ids)
    np.testing.assert_array_equal(after.labels, before.labels)
    np.testing.assert_array_equal(after.scores, before.scores)
    np.testing.assert_array_equal(loaded.vectors(), index.vectors())
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["format_version"] == 1 and set(meta["files"]) == {"index.faiss", "ids.npy", "labels.npy"}


def test_corrupted_or_missing_files_give_clear_errors(tmp_path):
    index = EmbeddingIndex(4)
    index.add(np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32))
    root = tmp_path / "idx"
    index.save(root)
    good = (root / "meta.json").read_text()
    (root / "meta.json").write_text(good[: len(good) // 2])
    with pytest.raises(IndexFormatError, match=r"meta.json is corrupted"):
        EmbeddingIndex.load(root)
    (root / "meta.json").write_text(good.replace('"dim": 4', '"dim": "four"'))
    with pytest.raises(IndexFormatError, match="meta.json is corrupted"):
        EmbeddingIndex.load(root)
    # a change that still parses and passes every consistency check is caught by meta.json's own checksum
    (root / "meta.json").write_text(good.replace('"nprobe": 8', '"nprobe": 9'))
    with pytest.raises(IndexFormatError, match="meta.json is corrupted: its content does not match"):
        EmbeddingIndex.load(root)
    (root / "meta.json").write_text(good)
    blob = bytearray((root / "index.faiss").read_bytes())
    blob[-5] ^= 0xFF
    (root / "index.faiss").write_bytes(bytes(blob))
    with pytest.raises(IndexFormatError, match=r"index.faiss is corrupted: its SHA-256"):
        EmbeddingIndex.load(root)
    blob[-5] ^= 0xFF
    (root / "index.faiss").write_bytes(bytes(blob))
    assert EmbeddingIndex.load(root).ntotal == 50  # restored
    (root / "ids.npy").unlink()
    with pytest.raises(IndexFormatError, match=r"ids.npy is missing"):
        EmbeddingIndex.load(root)
    with pytest.raises(IndexFormatError, match="no meta.json"):
        EmbeddingIndex.load(tmp_path / "nothing")


@pytest.mark.parametrize("as_torch", [False, True])
def test_an_empty_index_cannot_be_built_or_saved(tmp_path, as_torch):
    empty = np.empty((0, 4), np.float32)
    index = EmbeddingIndex(4)
    with pytest.raises(ValueError, match=r"^embeddings is empty \(shape \(0, 4\)\)"):
        index.add(torch.from_numpy(empty) if as_torch else empty)
    with pytest.raises(ValueError, match="^index is empty"):
        index.save(tmp_path / "idx")
    assert not (tmp_path / "idx" / "meta.json").exists()


def test_inputs_are_passed_without_copies_when_possible():
    x = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    assert np.shares_memory(as_float32_matrix("x", x), x)
    t = torch.from_numpy(x)
    assert np.shares_memory(as_float32_matrix("x", t), x)
    assert as_float32_matrix("x", x.astype(np.float64)).dtype == np.float32
    assert as_float32_matrix("x", np.asfortranarray(x)).flags.c_contiguous


def test_errors_name_the_argument():
    index = EmbeddingIndex(4)
    with pytest.raises(ValueError, match="^index is empty"):
        index.search(np.ones((1, 4), np.float32), 1)
    with pytest.raises(ValueError, match="^embeddings has dimension D = 3"):
        index.add(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="^embeddings contains NaN"):
        index.add(np.full((2, 4), np.nan, np.float32))
    with pytest.raises(ValueError, match="^embeddings row 1 has zero norm"):
        index.add(np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32))
    with pytest.raises(TypeError, match="^embeddings must be a torch.Tensor or numpy.ndarray"):
        index.add([[1.0, 2.0, 3.0, 4.0]])  # type: ignore[arg-type]
    index.add(np.eye(4, dtype=np.float32), ids=[1, 2, 3, 4])
    with pytest.raises(ValueError, match="^ids must be unique across the index; id 4 occurs twice"):
        index.add(np.eye(4, dtype=np.float32), ids=[4, 5, 6, 7])
    with pytest.raises(ValueError, match="^labels"):
        index.add(np.eye(4, dtype=np.float32), ids=[10, 11, 12, 13], labels=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="^k = 5 exceeds"):
        index.search(np.eye(4, dtype=np.float32), 5)
    with pytest.raises(ValueError, match="^k = 4 exceeds"):
        index.search(np.eye(4, dtype=np.float32), 4, exclude_ids=[1, 2, 3, 4])
    with pytest.raises(ValueError, match="^exclude_ids has length 2"):
        index.search(np.eye(4, dtype=np.float32), 1, exclude_ids=[1, 2])
    with pytest.raises(ValueError, match="^metric must be one of"):
        EmbeddingIndex(4, metric="l2")
    with pytest.raises(ValueError, match="^kind must be one of"):
        EmbeddingIndex(4, kind="pq")
    with pytest.raises(ValueError, match="^dim must be >= 1"):
        EmbeddingIndex(0)
    with pytest.raises(ValueError, match="^embeddings: IVF with nlist = 10"):
        EmbeddingIndex(4, kind="ivf", nlist=10).add(np.eye(4, dtype=np.float32))


def test_vectors_are_numpy_with_faiss_torch_utils_imported() -> None:
    """pytorch-metric-learning imports ``faiss.contrib.torch_utils``, which makes reconstruct_n return tensors."""
    code = (
        "import faiss.contrib.torch_utils, numpy as np\n"
        "from contrastlab.search import EmbeddingIndex\n"
        "x = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)\n"
        "index = EmbeddingIndex(8, metric='ip', kind='flat'); index.add(x)\n"
        "v = index.vectors(3, 9)\n"
        "assert type(v) is np.ndarray and np.array_equal(v, x[3:9]), type(v)\n"
    )
    run_fresh(code)
