"""Batches without false negatives: :class:`ConflictFreeSampler` and :func:`false_negative_mask`.

With in-batch negatives, row j's positive is a negative of row i's anchor. A candidate is a *false
negative* of an anchor when it is, as text, the anchor itself, the anchor's own positive (another row
holding the same text), or another document relevant to the anchor (its query's other positives). Texts
are compared by key (an identical text has one key, e.g. the token ids the model reads); keys are exact
(hashable values compared for equality, nothing hashed down), so no false negative is ever missed.

The relation is per anchor. Take rows (A, p1) and (B, p2) where A's relevant documents are p1 and p2, and
B's is p2: column p2 is a false negative of anchor A, while column p1 is a true negative of anchor B.

Two ways to keep false negatives out of the loss:

* :func:`false_negative_mask` marks, anchor by anchor, the candidate columns of a batch drawn without
  care, for a loss with per-candidate ``weights`` (:func:`contrastlab.losses.info_nce`), which then leaves
  exactly those columns out of that anchor's sums;
* :class:`ConflictFreeSampler` never puts two *conflicting* rows in one batch, so every loss, every batch
  keeps its N − 1 negatives per anchor. One batch shows row j's texts to row i and row i's texts to row j,
  so the relation between rows is symmetric: each example carries ``own`` keys (its texts: anchor,
  positive, negatives) and ``protected`` keys (texts that must not be its negatives), and rows i and j
  conflict iff ``own(i) ∩ (own(j) ∪ protected(j)) ≠ ∅`` or ``own(j) ∩ protected(i) ≠ ∅``
  (:func:`conflicts`). Any pair of rows with a false negative in either direction conflicts; the
  relation is loss-agnostic, so it also keeps apart rows whose only common text is one no loss compares
  (e.g. two rows sharing a hard negative).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from contrastlab.data.sampler import step_generator

__all__ = ["ConflictFreeSampler", "false_negative_mask", "conflicts"]

Keys = Sequence[Hashable]


def _check_keys(
    own: Sequence[Keys] | Sequence[Hashable],
    protected: Sequence[Keys] | None,
    *,
    names: tuple[str, str] = ("own", "protected"),
) -> Sequence[Keys]:
    if len(own) == 0:
        raise ValueError(f"{names[0]} must hold the keys of at least one example")
    if protected is None:
        return [()] * len(own)
    if len(protected) != len(own):
        raise ValueError(f"{names[1]} must have one entry per example ({len(own)}), got {len(protected)}")
    return protected


def conflicts(own_i: Keys, prot_i: Keys, own_j: Keys, prot_j: Keys) -> bool:
    """Whether rows i and j conflict: a shared text, or a text of one protected by the other."""
    oi, oj = set(own_i), set(own_j)
    return bool(oi & oj or oi & set(prot_j) or oj & set(prot_i))


def false_negative_mask(
    anchors: Sequence[Hashable], positives: Sequence[Hashable], relevant: Sequence[Keys] | None = None
) -> Tensor:
    """``mask[i, j]``: row j's positive is a false negative of anchor i. Shape ``(N, N)``.

    The rule is per anchor: for ``j ≠ i``, ``mask[i, j]`` holds iff ``positives[j]`` is ``anchors[i]``,
    ``positives[i]``, or one of ``relevant[i]``. It is not symmetric: when anchor A's relevant documents
    are p1 and p2 and anchor B's is p2, rows (A, p1) and (B, p2) give ``mask[A, B]`` (p2 is relevant to A)
    and not ``mask[B, A]`` (p1 is a true negative of B). The diagonal (the positive itself) is never masked.

    ``weights = (~mask).to(dtype)`` given to :func:`contrastlab.losses.info_nce` (in-batch negatives, the
    columns being the rows' positives in order) leaves exactly those candidates out of anchor i's sums.
    Under torchrun, the mask of the global batch cut by rows as the batch is
    (:func:`contrastlab.distributed.shard_rows`) is each
    rank's ``(n, N)`` weights over every rank's candidates, gathered in rank order.

    Args:
        anchors: the key of each row's anchor text, ``N`` entries.
        positives: the key of each row's positive text, ``N`` entries (the candidate columns).
        relevant: the keys of the documents relevant to each row's anchor (its own positive may be among
            them), ``N`` entries (None: only its own positive).

    Raises:
        ValueError: no rows, or ``positives``/``relevant`` without one entry per row.

    Examples:
        >>> false_negative_mask(["A", "B"], ["p1", "p2"], [("p1", "p2"), ("p2",)]).tolist()
        [[False, True], [False, False]]
    """
    rel = _check_keys(anchors, relevant, names=("anchors", "relevant"))
    n = len(anchors)
    if len(positives) != n:
        raise ValueError(f"positives must have one entry per example ({n}), got {len(positives)}")
    columns: dict[Hashable, list[int]] = {}  # the columns holding each positive text
    for j, k in enumerate(positives):
        columns.setdefault(k, []).append(j)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        hit = [j for k in {anchors[i], positives[i], *rel[i]} for j in columns.get(k, ())]
        if hit:
            mask[i, hit] = True
    mask.fill_diagonal_(False)
    return mask


class ConflictFreeSampler:
    """Indices of each step's batch, no two conflicting rows in a batch, every row once per epoch.

    Epoch ``e`` walks ``torch.randperm(n)`` seeded by ``(seed, e)`` and fills batches greedily: a batch
    first retries up to ``batch_size`` rows deferred by earlier batches (oldest first), then takes rows of
    the permutation in order; a row that conflicts with the batch is deferred. When the permutation is
    used up, the deferred rows fill the last batches (each pass over them takes every row that fits), so
    every row is placed exactly once per epoch; those last batches may be smaller than ``batch_size``
    and ``drop_last`` drops every batch that is. Each batch costs O(batch_size · keys) set operations
    until the permutation is used up, plus the deferred rows it skips; the epoch's tail costs
    O(D · T) for the D rows still deferred and its T batches (D is a handful for rare duplicates).

    The batches are a pure function of ``(seed, step)``: an epoch is built once and kept; a resumed run
    (any step) rebuilds the epochs before its own to count their batches, and draws the batches an
    uninterrupted run would.

    Args:
        own: the keys of each example's texts (e.g. token-id tuples), ``n`` entries.
        batch_size: rows per batch.
        protected: the keys each example must not meet among its negatives (None: none).
        seed: seeds the per-epoch permutations.
        drop_last: drop the batches smaller than ``batch_size`` (the end of each epoch).

    Examples:
        >>> s = ConflictFreeSampler([(0,), (0,), (1,), (2,)], 2, seed=0, drop_last=False)
        >>> sorted(len(s.indices_at(k)) for k in range(s.batches_in_epoch(0)))
        [2, 2]
    """

    def __init__(
        self,
        own: Sequence[Keys],
        batch_size: int,
        *,
        protected: Sequence[Keys] | None = None,
        seed: int = 0,
        drop_last: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        prot = _check_keys(own, protected)
        none: frozenset[Hashable] = frozenset()
        self._own = [frozenset(k) for k in own]
        self._prot = [frozenset(k) if k else none for k in prot]  # one shared empty set for the unprotected
        self.n, self.batch_size, self.seed, self.drop_last = len(own), batch_size, seed, drop_last
        self._first_step: list[int] = [0]  # the first step of each counted epoch, then the step after the last
        self._cached_epoch = -1
        self._cached: list[list[int]] = []  # the batches of one epoch, kept while it is read
        self._build(0)  # an impossible batch size fails here, not at the first step

    def _fits(self, i: int, used_own: set[Hashable], used_prot: set[Hashable]) -> bool:
        own, prot = self._own[i], self._prot[i]
        return own.isdisjoint(used_own) and own.isdisjoint(used_prot) and prot.isdisjoint(used_own)

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        perm = torch.randperm(self.n, generator=step_generator(self.seed, epoch)).tolist()
        bs = self.batch_size
        batches: list[list[int]] = []
        deferred: deque[int] = deque()
        pos = 0
        batch: list[int] = []
        used_own: set[Hashable] = set()
        used_prot: set[Hashable] = set()

        def add(i: int) -> None:
            batch.append(i)
            used_own.update(self._own[i])
            used_prot.update(self._prot[i])

        def close() -> None:
            nonlocal batch
            batches.append(batch)
            batch = []
            used_own.clear()
            used_prot.clear()

        while pos < self.n:
            for _ in range(min(len(deferred), bs)):  # retry the oldest deferred rows first, a bounded number
                if len(batch) == bs:
                    break
                i = deferred.popleft()
                if self._fits(i, used_own, used_prot):
                    add(i)
                else:
                    deferred.append(i)
            while len(batch) < bs and pos < self.n:
                i = perm[pos]
                pos += 1
                if self._fits(i, used_own, used_prot):
                    add(i)
                else:
                    deferred.append(i)
            if len(batch) == bs:
                close()
        while deferred:  # the tail: each pass over the deferred rows takes every row that still fits
            for _ in range(len(deferred)):
                i = deferred.popleft()
                if len(batch) < bs and self._fits(i, used_own, used_prot):
                    add(i)
                else:
                    deferred.append(i)
            close()
        if batch:
            close()
        return [b for b in batches if len(b) == bs] if self.drop_last else batches

    def _build(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch``; the epochs before it are built once to count their batches."""
        if epoch == self._cached_epoch:
            return self._cached
        while len(self._first_step) <= epoch + 1:  # count the batches of every epoch up to this one
            e = len(self._first_step) - 1
            batches = self._epoch_batches(e)
            if not batches:
                raise ValueError(
                    f"batch_size: epoch {e} has no batch of {self.batch_size} rows without a conflict "
                    "(drop_last dropped every batch); lower batch_size or set drop_last false"
                )
            self._first_step.append(self._first_step[-1] + len(batches))
            self._cached_epoch, self._cached = e, batches
        if epoch != self._cached_epoch:
            self._cached_epoch, self._cached = epoch, self._epoch_batches(epoch)
        return self._cached

    def batches_in_epoch(self, epoch: int) -> int:
        """How many batches epoch ``epoch`` has."""
        return len(self._build(epoch))

    def indices_at(self, step: int) -> Tensor:
        """Row indices of the batch at 0-based ``step``. Shape: ``(batch_size,)`` (tail batches may be shorter)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        while self._first_step[-1] <= step:
            self._build(len(self._first_step) - 1)
        epoch = bisect.bisect_right(self._first_step, step) - 1
        return torch.tensor(self._build(epoch)[step - self._first_step[epoch]], dtype=torch.long)

    __call__ = indices_at
