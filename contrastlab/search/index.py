"""``EmbeddingIndex``: a faiss index over a corpus of embeddings, with ids, labels and safe persistence.

A thin layer over faiss (``IndexFlatIP``, ``IndexIVFFlat``, ``IndexHNSWFlat``; inner-product metric, with
cosine done by L2-normalising corpus and queries). What it adds to a bare faiss index:

- torch tensors or numpy arrays in, validated (errors name the argument), passed to faiss as contiguous
  float32 views without copies (cosine needs one normalised copy);
- user ids and integer labels carried along, and a query's own id excluded from its results;
- batched top-k over many queries (memory bounded by the batch), with an optional progress bar;
- ``recall(queries, k)``: an approximate index's recall against exact search over the same vectors;
- ``save``/``load``: faiss's own index file plus ``ids.npy``/``labels.npy`` and a JSON sidecar of metadata
  with the size and SHA-256 of each file, itself checksummed (:func:`contrastlab.io.write_json_atomic`),
  all written atomically; loading never unpickles and names the file that is missing or corrupted.

The search step costs what the faiss call costs: the benchmark (``benchmarks/search.py``) measures the
ratio to a direct ``faiss.IndexFlatIP.search``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from torch import Tensor

from contrastlab import __version__
from contrastlab._checks import check_choice, check_embeddings, check_int
from contrastlab.io import CorruptFileError, atomic_path, read_json_verified, sha256_file, write_json_atomic
from contrastlab.npyfile import load_npy

__all__ = ["EmbeddingIndex", "SearchResult", "IndexFormatError", "as_float32_matrix"]

FORMAT_NAME = "contrastlab.search.EmbeddingIndex"
FORMAT_VERSION = 1
_KINDS = ("flat", "ivf", "hnsw")
_INDEX_FILES = ("index.faiss", "ids.npy", "labels.npy")
_METRICS = ("cosine", "ip")


class IndexFormatError(ValueError):
    """A saved index is missing a file, or a file does not match its sidecar (corrupted or tampered)."""


@dataclass(frozen=True)
class SearchResult:
    """Top-k results for ``Q`` queries, best first.

    Attributes:
        scores: ``(Q, k)`` float32 similarities (cosine or inner product); higher is more similar.
        positions: ``(Q, k)`` int64 row positions in the index (insertion order).
        ids: ``(Q, k)`` int64 user ids of the retrieved items.
        labels: ``(Q, k)`` int64 labels of the retrieved items, or ``None`` when the index has none.
    """

    scores: np.ndarray
    positions: np.ndarray
    ids: np.ndarray
    labels: np.ndarray | None


def as_float32_matrix(name: str, x: object, *, dim: int | None = None) -> np.ndarray:
    """Validate an ``(N, D)`` tensor or array and return it as a C-contiguous float32 numpy array.

    A contiguous float32 CPU tensor or array is returned as a view (no copy); anything else is converted once.

    Args:
        name: the argument's name for error messages.
        x: a torch tensor or numpy array of shape ``(N, D)``.
        dim: the required ``D``, if known.

    Returns:
        A float32 C-contiguous ``(N, D)`` array.

    Raises:
        TypeError: not a tensor/array, or not floating point.
        ValueError: wrong shape, empty, NaN/Inf, or ``D != dim``.
    """
    if isinstance(x, Tensor):
        t = check_embeddings(name, x.detach(), ndim=2)
        arr = t.to(device="cpu", dtype=torch.float32).numpy()
    elif isinstance(x, np.ndarray):  # checked in numpy: memory-mapped, read-only arrays stay as they are
        if x.dtype.kind != "f":
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{name} must have shape (N, D), got {x.shape}")
        if x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"{name} is empty (shape {x.shape}); every dimension must be at least 1")
        arr = np.asarray(x, dtype=np.float32)
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or Inf entries")
    else:
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} has dimension D = {arr.shape[1]} but the index has D = {dim}")
    return np.ascontiguousarray(arr)


def _normalized(name: str, x: np.ndarray) -> np.ndarray:
    """Return an L2-normalised copy of the rows of ``x``; zero rows have no direction and are rejected."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    bad = np.flatnonzero(norms[:, 0] == 0)
    if bad.size:
        raise ValueError(f"{name} row {int(bad[0])} has zero norm; cosine similarity is undefined for it")
    return np.divide(x, norms, dtype=np.float32)


def _int_vector(name: str, x: object, n: int) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer tensor or array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (N,), got {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has length {arr.shape[0]} but the embeddings have N = {n} rows")
    return arr.astype(np.int64, copy=False)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, arr, allow_pickle=False)


def _positive_int(name: str, value: object) -> int:
    return check_int(name, value, 1)


class EmbeddingIndex:
    """A searchable corpus of ``D``-dimensional embeddings, with ids and labels (faiss underneath).

    Args:
        dim: embedding dimension ``D``.
        metric: ``"cosine"`` (vectors are L2-normalised on the way in) or ``"ip"`` (raw inner product,
            the logits of Whiteley's softmax search up to ``1/τ``).
        kind: ``"flat"`` (exact), ``"ivf"`` (inverted lists, ``nlist`` cells, ``nprobe`` visited) or
            ``"hnsw"`` (graph, ``hnsw_m`` links, ``ef_search`` candidates).
        nlist: IVF cells; default ``round(4 √N)`` clipped to ``[1, N / 39]``, chosen at the first ``add``
            (which also trains the coarse quantizer on the vectors added).
        nprobe: IVF cells visited per query.
        hnsw_m: HNSW links per node.
        ef_search: HNSW candidate-list size at search time.
        ef_construction: HNSW candidate-list size while building.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``: search on GPU when faiss has GPU support (flat and IVF;
            HNSW always searches on CPU). The index is kept and saved on CPU.

    Examples:
        >>> index = EmbeddingIndex(8, metric="cosine")
        >>> index.add(torch.randn(100, 8), labels=torch.arange(100) % 5)
        >>> res = index.search(torch.randn(3, 8), k=4)
        >>> res.ids.shape, res.labels.shape
        ((3, 4), (3, 4))
    """

    def __init__(
        self,
        dim: int,
        *,
        metric: str = "cosine",
        kind: str = "flat",
        nlist: int | None = None,
        nprobe: int = 8,
        hnsw_m: int = 32,
        ef_search: int = 64,
        ef_construction: int = 40,
        device: str = "cpu",
    ) -> None:
        self.dim = _positive_int("dim", dim)
        self.metric = check_choice("metric", metric, _METRICS)
        self.kind = check_choice("kind", kind, _KINDS)
        self.nlist = None if nlist is None else _positive_int("nlist", nlist)
        self._nprobe = _positive_int("nprobe", nprobe)
        self.hnsw_m = _positive_int("hnsw_m", hnsw_m)
        self._ef_search = _positive_int("ef_search", ef_search)
        self.ef_construction = _positive_int("ef_construction", ef_construction)
        self.device = check_choice("device", device, ("cpu", "cuda", "auto"))
        if self.device == "cuda" and not hasattr(faiss, "StandardGpuResources"):
            raise ValueError("device='cuda' needs a faiss build with GPU support (faiss-gpu); this one is CPU-only")
        self._index: Any = None if kind == "ivf" else self._new_index(0)
        self._gpu_index: Any = None
        self._ids = np.empty(0, dtype=np.int64)
        self._labels: np.ndarray | None = None

    # ------------------------------------------------------------------ construction
    def _new_index(self, n_train: int) -> Any:
        mt = faiss.METRIC_INNER_PRODUCT
        if self.kind == "flat":
            return faiss.IndexFlatIP(self.dim)
        if self.kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, mt)
            hnsw.hnsw.efConstruction = self.ef_construction
            hnsw.hnsw.efSearch = self._ef_search
            return hnsw
        if self.nlist is None:
            self.nlist = int(min(max(1, round(4 * math.sqrt(n_train))), max(1, n_train // 39)))
        if n_train < self.nlist:
            raise ValueError(f"embeddings: IVF with nlist = {self.nlist} needs at least {self.nlist} vectors to train")
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFFlat(quantizer, self.dim, self.nlist, mt)
        ivf.nprobe = self._nprobe  # faiss's Python wrapper keeps `quantizer` alive with `ivf`
        return ivf

    @property
    def ntotal(self) -> int:
        """Number of indexed vectors."""
        return int(self._ids.shape[0])

    @property
    def ids(self) -> np.ndarray:
        """``(N,)`` int64 ids of the indexed vectors, in insertion order."""
        return self._ids

    @property
    def labels(self) -> np.ndarray | None:
        """``(N,)`` int64 labels, or ``None``."""
        return self._labels

    @property
    def nprobe(self) -> int:
        """IVF cells visited per query (higher: better recall, slower)."""
        return self._nprobe

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        self._nprobe = _positive_int("nprobe", value)
        if self.kind == "ivf" and self._index is not None:
            self._index.nprobe = self._nprobe
            self._gpu_index = None

    @property
    def ef_search(self) -> int:
        """HNSW candidate-list size at search time (higher: better recall, slower)."""
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._ef_search = _positive_int("ef_search", value)
        if self.kind == "hnsw":
            self._index.hnsw.efSearch = self._ef_search

    def __len__(self) -> int:
        return self.ntotal

    def __repr__(self) -> str:
        return f"EmbeddingIndex(dim={self.dim}, metric={self.metric!r}, kind={self.kind!r}, ntotal={self.ntotal})"

    def _prepare(self, name: str, x: object) -> np.ndarray:
        arr = as_float32_matrix(name, x, dim=self.dim)
        return _normalized(name, arr) if self.metric == "cosine" else arr

    def train(self, embeddings: Tensor | np.ndarray) -> None:
        """Train an IVF index's coarse quantizer on ``embeddings`` (a sample of the corpus); no-op otherwise.

        ``add`` trains on its first batch when this was not called; call it to train on a representative
        sample before adding a large corpus in chunks.

        Shape:
            embeddings: ``(M, D)`` with ``M >= nlist``.
        """
        if self.kind != "ivf" or self._index is not None:
            return
        x = self._prepare("embeddings", embeddings)
        self._index = self._new_index(x.shape[0])
        self._index.train(x)

    def add(
        self,
        embeddings: Tensor | np.ndarray,
        *,
        ids: Tensor | np.ndarray | None = None,
        labels: Tensor | np.ndarray | None = None,
    ) -> None:
        """Add vectors (with optional ids and labels) to the index.

        Shape:
            embeddings: ``(N, D)``; ids, labels: ``(N,)`` integers.

        Args:
            embeddings: the vectors.
            ids: unique int64 ids; default: their positions ``ntotal … ntotal + N − 1``.
            labels: integer labels; give them on every ``add`` or on none.

        Raises:
            ValueError, TypeError: invalid inputs, duplicate ids, or labels on some adds only.
        """
        x = self._prepare("embeddings", embeddings)
        n = x.shape[0]
        new_ids = np.arange(self.ntotal, self.ntotal + n, dtype=np.int64) if ids is None else _int_vector("ids", ids, n)
        all_ids = np.concatenate([self._ids, new_ids])
        uniq, counts = np.unique(all_ids, return_counts=True)
        if uniq.shape[0] != all_ids.shape[0]:
            dup = int(uniq[counts > 1][0])
            raise ValueError(
                f"ids must be unique across the index; id {dup} occurs twice (omitted ids default to row positions)"
            )
        if labels is None and self._labels is not None:
            raise ValueError("labels: the index has labels, so every add must give them")
        if labels is not None and self._labels is None and self.ntotal > 0:
            raise ValueError("labels: the index was built without labels; give labels on every add or on none")
        new_labels = None if labels is None else _int_vector("labels", labels, n)
        if self._index is None:  # IVF: train the coarse quantizer on the first batch
            self._index = self._new_index(n)
            self._index.train(x)
        self._index.add(x)
        if self.kind == "ivf":
            self._index.make_direct_map()  # so that vectors() can reconstruct
        self._gpu_index = None
        self._ids = all_ids
        if new_labels is not None:
            self._labels = new_labels if self._labels is None else np.concatenate([self._labels, new_labels])

    # ------------------------------------------------------------------ search
    def _searcher(self) -> Any:
        if self.device == "cpu" or self.kind == "hnsw" or not hasattr(faiss, "StandardGpuResources"):
            return self._index
        if self._gpu_index is None:
            self._gpu_res = faiss.StandardGpuResources()
            self._gpu_index = faiss.index_cpu_to_gpu(self._gpu_res, 0, self._index)
        return self._gpu_index

    def search(
        self,
        queries: Tensor | np.ndarray,
        k: int,
        *,
        exclude_ids: Tensor | np.ndarray | None = None,
        batch_size: int = 16384,
        progress: bool = False,
    ) -> SearchResult:
        """Top-``k`` most similar indexed items for each query, best first.

        Queries are searched in batches of ``batch_size`` (the output arrays are the only ``O(Q)`` memory).
        With ``exclude_ids``, each query's own entry (the item whose id equals the query's) is dropped from
        its results (``k + 1`` are retrieved and the self match, or else the last, is removed), as in
        pytorch-metric-learning's ``ref_includes_query``.

        Shape:
            queries: ``(Q, D)``; exclude_ids: ``(Q,)``. Result arrays: ``(Q, k)``.

        Args:
            queries: query vectors.
            k: neighbours per query, ``1 ≤ k ≤ N`` (``N − 1`` with ``exclude_ids``). HNSW searches with
                ``max(ef_search, k)`` candidates, since it cannot return more hits than candidates.
            exclude_ids: per query, an id to leave out of its results (use ids absent from the index for
                queries that are not in the corpus).
            batch_size: queries per faiss call.
            progress: show a progress bar (rich).

        Returns:
            :class:`SearchResult`.

        Raises:
            ValueError, TypeError: invalid inputs, an empty index, or ``k`` out of range.
        """
        if self.ntotal == 0:
            raise ValueError("index is empty; add embeddings before searching")
        xq = self._prepare("queries", queries)
        nq = xq.shape[0]
        excl = None if exclude_ids is None else _int_vector("exclude_ids", exclude_ids, nq)
        k = _positive_int("k", k)
        limit = self.ntotal - (1 if excl is not None else 0)
        if k > limit:
            raise ValueError(f"k = {k} exceeds the {limit} items that can be returned from this index")
        batch_size = _positive_int("batch_size", batch_size)
        kk = k + (1 if excl is not None else 0)
        scores = np.empty((nq, k), dtype=np.float32)
        positions = np.empty((nq, k), dtype=np.int64)
        searcher = self._searcher()
        if self.kind == "hnsw":  # HNSW returns at most efSearch hits: search with max(ef_search, k) candidates
            # (set on the index, not through `params=`, which faiss.contrib.torch_utils' wrapper drops)
            searcher.hnsw.efSearch = max(self._ef_search, kk)
        bar = _progress(progress, "searching", nq)
        try:
            for s in range(0, nq, batch_size):
                e = min(s + batch_size, nq)
                d, i = searcher.search(xq[s:e], kk)
                if excl is not None:
                    d, i = self._drop_self(d, i, excl[s:e], k)
                scores[s:e], positions[s:e] = d, i
                bar.advance(e - s)
        finally:
            bar.close()
            if self.kind == "hnsw":
                searcher.hnsw.efSearch = self._ef_search
        if (positions < 0).any():  # approximate indexes can return fewer than k hits
            raise ValueError(
                f"k = {k}: the index returned fewer than k results for some queries; raise nprobe/ef_search"
            )
        return SearchResult(
            scores=scores,
            positions=positions,
            ids=self._ids[positions],
            labels=None if self._labels is None else self._labels[positions],
        )

    def _drop_self(self, d: np.ndarray, i: np.ndarray, excl: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Remove the self match (or the last hit) from ``k + 1`` results per query."""
        hit_ids = np.where(i >= 0, self._ids[np.clip(i, 0, None)], np.iinfo(np.int64).min)
        drop = hit_ids == excl[:, None]  # (q, k+1)
        first = drop.argmax(axis=1)
        col = np.where(drop.any(axis=1), first, k)  # no self match: drop the (k+1)-th
        keep = np.ones_like(drop)
        keep[np.arange(drop.shape[0]), col] = False
        return d[keep].reshape(-1, k), i[keep].reshape(-1, k)

    def vectors(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The indexed vectors ``start:stop`` as stored (L2-normalised for ``metric="cosine"``).

        Shape:
            Returns ``(stop − start, D)`` float32.
        """
        stop = self.ntotal if stop is None else stop
        if not 0 <= start <= stop <= self.ntotal:
            raise ValueError(f"start, stop must satisfy 0 <= start <= stop <= {self.ntotal}, got {start}, {stop}")
        if stop == start:
            return np.empty((0, self.dim), dtype=np.float32)
        # into a numpy buffer: with faiss.contrib.torch_utils imported (by any package in the process)
        # reconstruct_n would otherwise return a torch tensor
        out = np.empty((stop - start, self.dim), dtype=np.float32)
        self._index.reconstruct_n(start, stop - start, out)
        return out

    def recall(self, queries: Tensor | np.ndarray, k: int = 10) -> float:
        """Recall of this index's top-``k`` against exact search over the same vectors.

        The fraction of the exact ``k`` nearest neighbours (by position) that this index returns, averaged
        over queries ("k-recall@k"). 1.0 for ``kind="flat"`` up to ties.

        Args:
            queries: ``(Q, D)`` query vectors (held-out ones give an honest estimate).
            k: neighbours compared.

        Returns:
            Recall in ``[0, 1]``.
        """
        got = self.search(queries, k).positions
        xq = self._prepare("queries", queries)
        exact = faiss.IndexFlatIP(self.dim)
        for s in range(0, self.ntotal, 1 << 18):
            exact.add(self.vectors(s, min(s + (1 << 18), self.ntotal)))
        _, ref = exact.search(xq, k)
        hits = sum(np.intersect1d(a, b).size for a, b in zip(got, ref, strict=True))
        return hits / float(ref.size)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Save to directory ``path``: ``index.faiss``, ``ids.npy``, [``labels.npy``] and ``meta.json``.

        Each file is written atomically; ``meta.json`` is written last and records the size and SHA-256 of
        the others, so a partial save or a later corruption is detected by :meth:`load`.
        """
        root = Path(path)
        if root.exists() and not root.is_dir():
            raise ValueError(f"path {root} exists and is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        if self._index is None or self.ntotal == 0:
            raise ValueError("index is empty; add embeddings before saving (a saved index cannot be searched empty)")
        with atomic_path(root / "index.faiss") as tmp:
            faiss.write_index(self._index, str(tmp))
        _save_npy(root / "ids.npy", self._ids)
        files = ["index.faiss", "ids.npy"]
        if self._labels is not None:
            _save_npy(root / "labels.npy", self._labels)
            files.append("labels.npy")
        elif (root / "labels.npy").exists():
            (root / "labels.npy").unlink()
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "contrastlab_version": __version__,
            "dim": self.dim,
            "metric": self.metric,
            "kind": self.kind,
            "ntotal": self.ntotal,
            "params": {
                "nlist": self.nlist,
                "nprobe": self._nprobe,
                "hnsw_m": self.hnsw_m,
                "ef_search": self._ef_search,
                "ef_construction": self.ef_construction,
            },
            "files": {f: {"bytes": (root / f).stat().st_size, "sha256": sha256_file(root / f)} for f in files},
        }
        write_json_atomic(root / "meta.json", meta)

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu", verify: bool = True) -> EmbeddingIndex:
        """Load an index written by :meth:`save` (no pickle is ever read).

        Args:
            path: the index directory.
            device: as in the constructor.
            verify: check every file's SHA-256 against the sidecar (reads each file once).

        Returns:
            The index.

        Raises:
            IndexFormatError: a missing or corrupted file, named.
        """
        root = Path(path)
        meta_path = root / "meta.json"
        if not meta_path.is_file():
            raise IndexFormatError(f"path {root}: no meta.json sidecar; not a saved EmbeddingIndex")
        try:
            meta = read_json_verified(meta_path)
        except CorruptFileError as e:
            raise IndexFormatError(str(e)) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise IndexFormatError(f"{meta_path} is not an EmbeddingIndex sidecar (format field missing or wrong)")
        if meta.get("format_version") != FORMAT_VERSION:
            raise IndexFormatError(
                f"{meta_path} has format_version {meta.get('format_version')!r}; "
                f"this contrastlab reads {FORMAT_VERSION}"
            )
        try:
            params = meta["params"]
            index = cls(
                int(meta["dim"]),
                metric=meta["metric"],
                kind=meta["kind"],
                nlist=params["nlist"],
                nprobe=params["nprobe"],
                hnsw_m=params["hnsw_m"],
                ef_search=params["ef_search"],
                ef_construction=params["ef_construction"],
                device=device,
            )
            ntotal = int(meta["ntotal"])
            files = dict(meta["files"])
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise IndexFormatError(f"{meta_path} is corrupted (bad or missing field: {e})") from None
        for name in ("index.faiss", "ids.npy"):
            if name not in files:
                raise IndexFormatError(f"{meta_path} is corrupted (no entry for {name})")
        # only the index's own files are ever opened: a listed "../x" or "/dev/zero" would be read (forever)
        unknown = sorted(str(n)[:80] for n in files if n not in _INDEX_FILES)
        if unknown:
            raise IndexFormatError(f"{meta_path} is corrupted (lists files that are not part of an index: {unknown})")
        for name, info in files.items():
            f = root / name
            if not f.is_file():
                raise IndexFormatError(f"{f} is missing (listed in meta.json)")
            if not isinstance(info, dict) or f.stat().st_size != info.get("bytes"):
                raise IndexFormatError(f"{f} is corrupted: its size does not match meta.json")
            if verify and sha256_file(f) != info.get("sha256"):
                raise IndexFormatError(f"{f} is corrupted: its SHA-256 does not match meta.json")
        try:
            fx = faiss.read_index(str(root / "index.faiss"))
            ids = load_npy(root / "ids.npy")
            labels = load_npy(root / "labels.npy") if "labels.npy" in files else None
        except (RuntimeError, ValueError, OSError) as e:
            raise IndexFormatError(f"path {root}: cannot read the index files ({e})") from None
        if fx.ntotal != ntotal or fx.d != index.dim or ids.shape != (ntotal,) or ids.dtype != np.int64:
            raise IndexFormatError(f"path {root}: index.faiss/ids.npy disagree with meta.json (ntotal, dim or dtype)")
        if labels is not None and (labels.shape != (ntotal,) or labels.dtype != np.int64):
            raise IndexFormatError(f"path {root}: labels.npy disagrees with meta.json")
        index._index = fx
        if index.kind == "ivf":
            index._index.nprobe = index._nprobe
            index._index.make_direct_map()
        elif index.kind == "hnsw":
            index._index.hnsw.efSearch = index._ef_search
        index._ids = ids
        index._labels = labels
        return index


class _Bar:
    """A rich progress bar that is a no-op when disabled."""

    def __init__(self, enabled: bool, description: str, total: int) -> None:
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import Progress

            self._progress = Progress(console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(description, total=total)

    def advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _progress(enabled: bool, description: str, total: int) -> _Bar:
    return _Bar(enabled, description, total)
