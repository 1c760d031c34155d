"""Softmax similarity search over a whole corpus, streamed in blocks.

Whiteley (arXiv 2607.09405, §1.2) reads a contrastive model as a *softmax search*: given a query ``q``
and a corpus ``ξ_1 … ξ_N``, pick item ``i`` with probability (eqs 4 and 6)

    P(i | q) = exp(s ⟨q, ξ_i⟩) / Σ_j exp(s ⟨q, ξ_j⟩),        s = 1/τ (learned search) or κ (idealised),

and measures a model by the cross-entropy between two such searches (eqs 7 and 9). Everything here
works on the full corpus without ever holding the ``(queries, N)`` logit matrix: the corpus is visited in
blocks of rows, and each block updates an online log-sum-exp (running maximum ``m`` and rescaled sum
``Σ exp(x - m)``), so memory is ``O(queries × block)`` whatever ``N`` is. Block logits are computed in
float32 (float64 if the inputs are float64) and the running state is kept in float64, which makes the
streamed log-partition agree with ``torch.logsumexp`` to float32 rounding even at τ = 0.01.

A *search* is either a ``SoftmaxSearch(queries, corpus, scale)`` triple or a *logits function*
``fn(start, stop) -> (Q, stop - start)`` tensor that produces the logits of corpus rows ``start:stop``
(for searches whose logits are not an inner product). A *corpus* is an ``(N, D)`` tensor or numpy array
(a memory map is fine), or a re-iterable of ``(B_i, D)`` blocks such as :class:`NpyBlocks`, which reads
an ``.npy`` file block by block so that not even the corpus has to fit in memory.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_bool, check_embeddings, check_positive_float
from contrastlab.npyfile import NpyFormatError, read_npy_header

if TYPE_CHECKING:
    from contrastlab.search.index import EmbeddingIndex

__all__ = [
    "SoftmaxSearch",
    "NpyBlocks",
    "TopKLogPartition",
    "log_partition",
    "log_prob",
    "sample",
    "cross_entropy",
    "entropy",
    "topk_log_partition",
    "item_logits_and_log_partition",
]

Corpus = Tensor | np.ndarray | Iterable[Tensor | np.ndarray]
LogitsFn = Callable[[int, int], Tensor]

_BLOCK_ELEMENTS = 1 << 24  # default block: 2^24 logits per block (64 MiB in float32)


class SoftmaxSearch(NamedTuple):
    """A softmax search: logits ``scale · ⟨queries_q, corpus_i⟩`` over every corpus row (Whiteley eq. 6).

    Attributes:
        queries: ``(Q, D)`` tensor or array.
        corpus: ``(N, D)`` tensor or array, or a re-iterable of ``(B_i, D)`` blocks (e.g. :class:`NpyBlocks`).
        scale: the inverse temperature ``1/τ`` of a learned search, or ``κ`` of the idealised one.
    """

    queries: Tensor | np.ndarray
    corpus: Corpus
    scale: float


class NpyBlocks:
    """A re-iterable view of an ``(N, D)`` ``.npy`` file that reads ``block_size`` rows at a time.

    The file is read with ordinary reads (not a memory map), so a pass over it keeps one block resident:
    use it to stream a corpus larger than memory through :func:`log_partition` and friends.

    Args:
        path: a C-ordered 2-D ``.npy`` file of a floating-point dtype.
        block_size: rows per block.

    Raises:
        ValueError: the file is not a 2-D, C-ordered, floating-point ``.npy`` array, or ``block_size`` < 1.
    """

    def __init__(self, path: str | Path, block_size: int = 65536) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        self.path = Path(path)
        self.block_size = block_size
        shape, fortran, dtype, self._offset = read_npy_header(self.path)
        if len(shape) != 2 or fortran or dtype.kind != "f":
            raise NpyFormatError(
                f"path {self.path} must hold a C-ordered 2-D floating-point array, got shape {shape}, dtype {dtype}, "
                f"fortran_order={fortran}"
            )
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        self.dtype = dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Iterator[np.ndarray]:
        n, d = self.shape
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            for start in range(0, n, self.block_size):
                rows = min(self.block_size, n - start)
                block = np.fromfile(f, dtype=self.dtype, count=rows * d)
                if block.size != rows * d:
                    raise ValueError(f"path {self.path} is truncated: expected {n} rows of {d}")
                yield block.reshape(rows, d)


# --------------------------------------------------------------------------------------------------
# Streaming machinery
# --------------------------------------------------------------------------------------------------


def _as_tensor(name: str, x: object) -> Tensor:
    """Return ``x`` as a floating tensor (numpy arrays are wrapped without a copy) and validate it."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind != "f":
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        with warnings.catch_warnings():  # read-only (memory-mapped) arrays are only ever read here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            x = torch.from_numpy(np.ascontiguousarray(x))
    return check_embeddings(name, x, ndim=2)


def _scale_of(temperature: float | None, scale: float | None) -> float:
    if (temperature is None) == (scale is None):
        raise ValueError("temperature and scale: give exactly one of them (scale = 1/temperature)")
    if temperature is not None:
        return 1.0 / check_positive_float("temperature", temperature)
    return check_positive_float("scale", scale)


def _block_rows(block_size: int | None, num_queries: int) -> int:
    if block_size is None:
        return max(1, _BLOCK_ELEMENTS // max(1, num_queries))
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer or None, got {block_size!r}")
    return block_size


def _corpus_blocks(corpus: Corpus, rows: int, name: str) -> Iterator[tuple[int, Tensor]]:
    """Yield ``(start, block)`` over the corpus, slicing tensors/arrays into blocks of ``rows`` rows."""
    if isinstance(corpus, (Tensor, np.ndarray)):
        if corpus.ndim != 2:
            raise ValueError(f"{name} must have shape (N, D), got {tuple(corpus.shape)}")
        if corpus.shape[0] == 0:
            raise ValueError(f"{name} is empty; the corpus needs at least one row")
        for start in range(0, corpus.shape[0], rows):
            yield start, _as_tensor(name, corpus[start : start + rows])
        return
    if not isinstance(corpus, Iterable):
        raise TypeError(f"{name} must be a tensor, an array or an iterable of blocks, got {type(corpus).__name__}")
    start = 0
    for block in corpus:
        t = _as_tensor(name, block)
        for s in range(0, t.shape[0], rows):
            yield start + s, t[s : s + rows]
        start += t.shape[0]
    if start == 0:
        raise ValueError(f"{name} yielded no rows; the corpus needs at least one row")


def _search_logits(search: object, rows: int | None, num_items: int | None, name: str) -> Iterator[Tensor]:
    """Yield the ``(Q, B)`` logit blocks of a search, in corpus order."""
    if callable(search) and not isinstance(search, tuple):
        if num_items is None:
            raise ValueError(f"num_items is required when {name} is a logits function")
        step = rows if rows is not None else 4096
        for start in range(0, num_items, step):
            stop = min(start + step, num_items)
            block = search(start, stop)
            if not isinstance(block, Tensor) or block.ndim != 2 or block.shape[1] != stop - start:
                got = tuple(block.shape) if isinstance(block, Tensor) else type(block).__name__
                raise ValueError(f"{name}({start}, {stop}) must return a (Q, {stop - start}) tensor, got {got}")
            if not block.is_floating_point() or not bool(torch.isfinite(block).all()):
                raise ValueError(f"{name}({start}, {stop}) returned non-finite or non-float logits")
            yield block
        return
    if not isinstance(search, tuple) or len(search) != 3:
        raise TypeError(f"{name} must be a SoftmaxSearch(queries, corpus, scale) or a logits function")
    queries, corpus, scale = search
    q = _as_tensor(f"{name}.queries", queries)
    s = check_positive_float(f"{name}.scale", scale)
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    q = q.to(dtype)
    for _, block in _corpus_blocks(corpus, _block_rows(rows, q.shape[0]), f"{name}.corpus"):
        if block.shape[1] != q.shape[1]:
            raise ValueError(
                f"{name}.corpus has dimension D = {block.shape[1]} but {name}.queries has D = {q.shape[1]}"
            )
        yield (q @ block.to(device=q.device, dtype=dtype).T).mul_(s)  # (Q, B)


class _OnlineLSE:
    """Running ``log Σ_i exp(x_i)`` per query: max ``m`` and ``s = Σ exp(x_i − m)``, both float64."""

    def __init__(self) -> None:
        self.m: Tensor | None = None  # (Q,)
        self.s: Tensor | None = None  # (Q,)

    def update(self, x: Tensor) -> None:
        m_b = x.max(dim=1).values  # (Q,)
        s_b = torch.sub(x, m_b[:, None]).exp_().sum(dim=1).double()  # exp entries in (0, 1]
        m_b = m_b.double()
        if self.m is None or self.s is None:
            self.m, self.s = m_b, s_b
            return
        if m_b.shape != self.m.shape:
            raise ValueError(f"logit blocks disagree on the number of queries: {m_b.shape[0]} vs {self.m.shape[0]}")
        m = torch.maximum(self.m, m_b)
        self.s = self.s * torch.exp(self.m - m) + s_b * torch.exp(m_b - m)
        self.m = m

    def logsumexp(self) -> Tensor:
        assert self.m is not None and self.s is not None
        return self.m + torch.log(self.s)


class _OnlineCE:
    """Running ``CE[P‖Q] = Σ_i p_i (logsumexp(b) − b_i)`` for logits ``a`` (of P) and ``b`` (of Q).

    Kept as ``log s_b − t / s_a`` with ``t = Σ_i exp(a_i − m_a)(b_i − m_b)``: the large common offset ``m_b``
    cancels exactly instead of being subtracted from a float32-rounded mean, which keeps a small entropy
    of a peaked search accurate (the float32 logits' own rounding is what is left).
    """

    def __init__(self) -> None:
        self.a = _OnlineLSE()
        self.b = _OnlineLSE()
        self.t: Tensor | None = None  # (Q,) float64

    def update(self, a: Tensor, b: Tensor) -> None:
        mb_old, sa_old = self.b.m, self.a.s
        self.b.update(b)
        assert self.b.m is not None
        mb = self.b.m  # the new running max of b (a float32 value, exact in b's dtype)
        ma_b = a.max(dim=1).values
        ea = torch.sub(a, ma_b[:, None]).exp_()  # (Q, B)
        t_b = (ea * torch.sub(b, mb.to(b.dtype)[:, None])).sum(dim=1).double()  # centred by the new max
        ma_old = self.a.m
        self.a.update(a)
        assert self.a.m is not None
        if self.t is None or ma_old is None or mb_old is None or sa_old is None:
            self.t = t_b * torch.exp(ma_b.double() - self.a.m)
            return
        t_old = self.t + sa_old * (mb_old - mb)  # re-centre the old sum on the new max of b
        self.t = t_old * torch.exp(ma_old - self.a.m) + t_b * torch.exp(ma_b.double() - self.a.m)

    def value(self) -> Tensor:
        assert self.b.s is not None and self.a.s is not None and self.t is not None
        return torch.log(self.b.s) - self.t / self.a.s


# --------------------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------------------


def log_partition(
    queries: Tensor | np.ndarray,
    corpus: Corpus,
    *,
    temperature: float | None = None,
    scale: float | None = None,
    block_size: int | None = None,
    average: bool = False,
) -> Tensor:
    """Exact log-partition of the softmax search, ``log Σ_i exp(⟨q, ξ_i⟩ / τ)``, streamed over the corpus.

    The normaliser of Whiteley's softmax search (eqs 4–6). The corpus is visited in blocks with an online
    log-sum-exp, so memory is ``O(Q × block_size)`` and nothing overflows at small τ.

    By default this is the log of the *sum* over the ``N`` corpus rows (no ``− log N``). With
    ``average=True`` it is the log of the *mean*, ``log (1/N) Σ_i exp(⟨q, ξ_i⟩ / τ)`` — the sum's value
    minus ``log N`` — which, for a corpus drawn i.i.d. from π_data, estimates the model kernel's
    normaliser ``log ∫ e^{⟨φ(z), φ(z')⟩/τ} π_data(dz')`` (Whiteley eqs 5 and 9).

    Shape:
        queries: ``(Q, D)``. corpus: ``(N, D)`` or blocks ``(B_i, D)``. Returns ``(Q,)`` float64.

    Args:
        queries: query embeddings (tensor or array; a CUDA tensor computes on its device).
        corpus: the corpus (see module docstring).
        temperature: τ > 0; the logits are ``⟨q, ξ⟩ / τ``. Give either this or ``scale``.
        scale: multiplier of the inner product (``1/τ``, or ``κ`` for the idealised search).
        block_size: corpus rows per block; default ``2^24 // Q`` (64 MiB of float32 logits).
        average: subtract ``log N`` (the log of the mean instead of the sum over the corpus).

    Returns:
        ``log Z(q)`` per query, in float64 (``log Z(q) − log N`` with ``average``).

    Raises:
        ValueError, TypeError: invalid inputs, named.

    Examples:
        >>> q, c = torch.randn(3, 8), torch.randn(1000, 8)
        >>> torch.allclose(log_partition(q, c, temperature=0.1, block_size=97),
        ...                torch.logsumexp(q.double() @ c.double().T / 0.1, 1), rtol=1e-5)
        True
    """
    check_bool("average", average)
    s = _scale_of(temperature, scale)
    lse = _OnlineLSE()
    n = 0
    for x in _search_logits(SoftmaxSearch(queries, corpus, s), block_size, None, "search"):
        lse.update(x)
        n += x.shape[1]
    return lse.logsumexp() - math.log(n) if average else lse.logsumexp()


def log_prob(
    queries: Tensor | np.ndarray,
    corpus: Corpus,
    items: Tensor | np.ndarray,
    *,
    temperature: float | None = None,
    scale: float | None = None,
    block_size: int | None = None,
) -> Tensor:
    """Log-probability that the softmax search for each query returns the given corpus items (eq. 6).

    ``log P(i | q) = ⟨q, ξ_i⟩ / τ − log Z(q)``, with ``Z`` and the item logits gathered in one streamed pass.

    Shape:
        queries: ``(Q, D)``; corpus: ``(N, D)``; items: ``(Q,)`` or ``(Q, M)`` corpus row positions.
        Returns float64 of the shape of ``items``.

    Args:
        queries: query embeddings.
        corpus: the corpus.
        items: integer corpus positions in ``[0, N)``, one row of items per query.
        temperature: τ > 0 (or give ``scale``).
        scale: inner-product multiplier.
        block_size: corpus rows per block.

    Returns:
        ``log P(items | q)`` in float64; ``exp`` of it sums to 1 over all ``N`` items.

    Raises:
        ValueError, TypeError: invalid inputs, or an item outside ``[0, N)``.
    """
    s = _scale_of(temperature, scale)
    it = torch.as_tensor(items)
    if it.is_floating_point() or it.dtype == torch.bool:
        raise TypeError(f"items must be an integer tensor or array, got dtype {it.dtype}")
    squeeze = it.ndim == 1
    it2 = it[:, None] if squeeze else it
    if it2.ndim != 2:
        raise ValueError(f"items must have shape (Q,) or (Q, M), got {tuple(it.shape)}")
    picked, log_z, n = item_logits_and_log_partition(queries, corpus, it2, scale=s, block_size=block_size)
    if int(it2.min()) < 0 or int(it2.max()) >= n:
        raise ValueError(f"items must lie in [0, N) = [0, {n}), got range [{int(it2.min())}, {int(it2.max())}]")
    out = picked - log_z[:, None]
    return out[:, 0] if squeeze else out


def item_logits_and_log_partition(
    queries: Tensor | np.ndarray, corpus: Corpus, items: Tensor, *, scale: float, block_size: int | None = None
) -> tuple[Tensor, Tensor, int]:
    """The logits of given corpus rows and the log-partition, gathered in one streamed pass.

    The two halves of :func:`log_prob` (which subtracts them), kept apart so that a corpus split into
    shards can combine its shards' log-partitions before subtracting.

    Shape:
        queries: ``(Q, D)``; items: ``(Q, M)`` integer row positions. Returns ``(Q, M)`` and ``(Q,)`` float64
        and ``N``; an item outside ``[0, N)`` gets logit 0 (the caller checks the range).
    """
    lse = _OnlineLSE()
    picked: Tensor | None = None
    start = 0
    for x in _search_logits(SoftmaxSearch(queries, corpus, scale), block_size, None, "search"):
        if items.shape[0] != x.shape[0]:
            raise ValueError(f"items has {items.shape[0]} rows but queries has Q = {x.shape[0]}")
        items = items.to(x.device)
        if picked is None:
            picked = torch.zeros(items.shape, dtype=torch.float64, device=x.device)
        stop = start + x.shape[1]
        inside = (items >= start) & (items < stop)
        vals = x.gather(1, (items - start).clamp(0, x.shape[1] - 1)).double()
        picked = torch.where(inside, vals, picked)
        lse.update(x)
        start = stop
    assert picked is not None
    return picked, lse.logsumexp(), start


def sample(
    queries: Tensor | np.ndarray,
    corpus: Corpus,
    num_samples: int,
    *,
    generator: torch.Generator,
    temperature: float | None = None,
    scale: float | None = None,
    block_size: int | None = None,
) -> Tensor:
    """Draw corpus items from the softmax search of each query (Whiteley eq. 4) by streamed Gumbel-max.

    Each draw adds i.i.d. standard Gumbel noise to every logit and keeps the arg-max, which is an exact
    sample from the softmax; the running arg-max is carried across blocks, so memory is
    ``O(Q × num_samples × block)``. The draws are a deterministic function of the generator's state and
    of the block partition.

    Shape:
        queries: ``(Q, D)``; corpus: ``(N, D)``. Returns ``(Q, num_samples)`` int64 corpus positions.

    Args:
        queries: query embeddings.
        corpus: the corpus.
        num_samples: draws per query (with replacement).
        generator: seeded ``torch.Generator`` on the queries' device.
        temperature: τ > 0 (or give ``scale``).
        scale: inner-product multiplier.
        block_size: corpus rows per logit block (the noise is drawn in chunks of at most 2^24 values).

    Returns:
        Sampled corpus positions.

    Raises:
        ValueError, TypeError: invalid inputs, named.
    """
    s = _scale_of(temperature, scale)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    best_val: Tensor | None = None
    best_idx: Tensor | None = None
    start = 0
    for x in _search_logits(SoftmaxSearch(queries, corpus, s), block_size, None, "search"):
        q, b = x.shape
        chunk = max(1, _BLOCK_ELEMENTS // (q * num_samples))
        for c0 in range(0, b, chunk):
            xc = x[:, c0 : c0 + chunk]  # (Q, C)
            g = torch.empty((q, num_samples, xc.shape[1]), dtype=x.dtype, device=x.device)
            g.exponential_(generator=generator)  # E ~ Exp(1), so −log E ~ Gumbel(0, 1)
            g.clamp_min_(torch.finfo(x.dtype).tiny).log_().neg_().add_(xc[:, None, :])  # (Q, S, C) logits + Gumbel
            val, idx = g.max(dim=2)  # (Q, S)
            idx = idx + (start + c0)
            if best_val is None or best_idx is None:
                best_val, best_idx = val, idx
            else:
                better = val > best_val
                best_val = torch.where(better, val, best_val)
                best_idx = torch.where(better, idx, best_idx)
        start += b
    assert best_idx is not None
    return best_idx


def cross_entropy(
    p: SoftmaxSearch | tuple[Tensor | np.ndarray, Corpus, float] | LogitsFn,
    q: SoftmaxSearch | tuple[Tensor | np.ndarray, Corpus, float] | LogitsFn,
    *,
    num_items: int | None = None,
    block_size: int | None = None,
    density: bool = False,
) -> Tensor:
    """Cross-entropy ``CE[P‖Q] = −Σ_i P(i|q) log Q(i|q)`` between two softmax searches over one corpus.

    With ``a_i``, ``b_i`` the logits of ``P`` and ``Q``: ``CE = logsumexp(b) − Σ_i softmax(a)_i b_i``,
    both terms streamed in one pass (the weighted sum is rescaled with ``P``'s running maximum). For
    Whiteley's similarity-search cross-entropy (eq. 9) take ``P`` the idealised search (logits
    ``κ⟨ζ_q, ζ_i⟩``, the importance weights of the vMF positive generator, §1.4) and ``Q`` the learned one
    (logits ``⟨φ_q, φ_i⟩ / τ``); ``density=True`` subtracts ``log N``, giving eq. 9's value (the
    cross-entropy of densities with respect to the empirical measure ``π̂_m``).

    Shape:
        Both searches have ``Q`` queries and ``N`` corpus items (their corpora are aligned row by row).
        Returns ``(Q,)`` float64.

    Args:
        p: the reference search: ``SoftmaxSearch(queries, corpus, scale)`` (or a plain triple), or a
            logits function ``fn(start, stop) -> (Q, stop - start)``.
        q: the model search, same forms.
        num_items: ``N``; required when either search is a logits function.
        block_size: corpus rows per block (default ``2^24 // Q``; 4096 for logits functions).
        density: subtract ``log N`` (Whiteley eq. 9).

    Returns:
        Per-query cross-entropy in nats; ``cross_entropy(p, p)`` is the entropy of ``p``.

    Raises:
        ValueError, TypeError: malformed searches, or searches that disagree on ``Q`` or ``N``.
    """
    if p is q:
        return entropy(p, num_items=num_items, block_size=block_size, density=density)
    if block_size is None and (callable(p) and not isinstance(p, tuple)) != (callable(q) and not isinstance(q, tuple)):
        # align a triple's default block with the logits function's
        block_size = 4096
    acc = _OnlineCE()
    n = 0
    pb = _search_logits(p, block_size, num_items, "p")
    qb = _search_logits(q, block_size, num_items, "q")
    for a in pb:
        b = next(qb, None)
        if b is None:
            raise ValueError(f"q has fewer corpus items than p (p has more than {n})")
        if a.shape != b.shape:
            raise ValueError(f"p and q produce logit blocks of shapes {tuple(a.shape)} and {tuple(b.shape)}")
        acc.update(a, b.to(device=a.device, dtype=a.dtype))
        n += a.shape[1]
    if next(qb, None) is not None:
        raise ValueError(f"q has more corpus items than p (p has {n})")
    ce = acc.value()
    return ce - math.log(n) if density else ce


def entropy(
    search: SoftmaxSearch | tuple[Tensor | np.ndarray, Corpus, float] | LogitsFn,
    *,
    num_items: int | None = None,
    block_size: int | None = None,
    density: bool = False,
) -> Tensor:
    """Entropy ``−Σ_i P(i|q) log P(i|q) = logsumexp(a) − Σ_i softmax(a)_i a_i`` of a softmax search.

    Shape:
        Returns ``(Q,)`` float64.

    Args:
        search: ``SoftmaxSearch(queries, corpus, scale)`` or a logits function.
        num_items: ``N``; required for a logits function.
        block_size: corpus rows per block.
        density: subtract ``log N`` (as in :func:`cross_entropy`).

    Returns:
        Per-query entropy in nats, in ``[0, log N]`` (``density=False``).
    """
    acc = _OnlineCE()
    n = 0
    for a in _search_logits(search, block_size, num_items, "search"):
        acc.update(a, a)
        n += a.shape[1]
    h = acc.value()
    return h - math.log(n) if density else h


class TopKLogPartition(NamedTuple):
    """Bounds on ``log Z`` from the top-k scores (see :func:`topk_log_partition`); each ``(Q,)`` float64.

    Attributes:
        lower: ``log Σ_{top k} exp(s·score)`` — the top-k estimate, never above the exact value.
        upper: ``log(exp(lower) + (N − k) exp(s·score_k))`` — never below the exact value.
    """

    lower: Tensor
    upper: Tensor

    @property
    def max_error(self) -> Tensor:
        """``upper − lower``: how far the top-k estimate can be from the exact log-partition."""
        return self.upper - self.lower


def topk_log_partition(
    index: EmbeddingIndex,
    queries: Tensor | np.ndarray,
    k: int,
    *,
    temperature: float | None = None,
    scale: float | None = None,
) -> TopKLogPartition:
    """Approximate log-partition from the ``k`` best items of an exact index, with a bound on the tail.

    The ``N − k`` items outside the top ``k`` each score at most the ``k``-th score ``s_(k)``, so
    ``L = logsumexp_{top k}(s·score) ≤ log Z ≤ log(e^L + (N − k) e^{s·s_(k)}) = U``. The gap ``U − L`` is
    small when the search is peaked (small τ, a clear nearest neighbour) and is the price of never
    touching the rest of the corpus. The scores are the index's (cosine scores for ``metric="cosine"``:
    compare with :func:`log_partition` over the normalised vectors, ``index.vectors()``).

    Shape:
        queries: ``(Q, D)``. ``lower``/``upper``: ``(Q,)`` float64.

    Args:
        index: an exact (``kind="flat"``) :class:`~contrastlab.search.EmbeddingIndex`; an approximate
            index could miss items above ``s_(k)`` and void the bound.
        queries: query embeddings.
        k: number of top items, ``1 ≤ k ≤ N``.
        temperature: τ > 0 (or give ``scale``).
        scale: inner-product multiplier.

    Returns:
        :class:`TopKLogPartition` with ``lower`` and ``upper``.

    Raises:
        ValueError: the index is approximate, or ``k`` is out of range.
    """
    s = _scale_of(temperature, scale)
    if index.kind != "flat":
        raise ValueError(f"index must be exact (kind='flat') for the tail bound to hold, got kind={index.kind!r}")
    res = index.search(queries, k)
    logits = torch.from_numpy(res.scores).double() * s  # (Q, k), descending
    lower = torch.logsumexp(logits, dim=1)
    tail = math.log(index.ntotal - k) + logits[:, -1] if index.ntotal > k else torch.full_like(lower, -math.inf)
    upper = torch.logaddexp(lower, tail)
    return TopKLogPartition(lower=lower, upper=upper)
