"""Stored (anchor, positive) pairs, optionally with mined hard negatives: the ``pairs`` dataset of ``contrastlab train``.

``data.name: pairs`` reads, from the folder ``data.root``:

* ``anchors.npy`` and ``positives.npy`` — ``(N, F)`` float arrays, row i a positive pair (encoder inputs);
* optionally, together, ``corpus.npy`` — ``(M, F)`` encoder inputs of the corpus — and
  ``negatives.npz`` — the :class:`~contrastlab.search.MinedNegatives` of the N anchors, written by
  its ``save``, whose ids are corpus rows. Each batch then carries the ``(n, K, F)`` mined negatives
  of its anchors, which the job's ``info_nce``/``dcl`` loss embeds and uses as per-anchor negatives;
  anchors with fewer than K mined negatives are not trained on.

The last ``eval.n`` pairs are held out for evaluation; batches are drawn from the others by an
:class:`~contrastlab.train.EpochSampler` seeded by ``train.seed`` (a pure function of the step).
Arrays are memory-mapped, so a batch reads only its rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from contrastlab.config import ConfigError
from contrastlab.data.sampler import EpochSampler
from contrastlab.npyfile import NpyFormatError, load_npy
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.data_source import DataSource

__all__ = ["build_pairs", "PAIRS_FILES", "MINED_FILES"]

PAIRS_FILES = ("anchors.npy", "positives.npy")
MINED_FILES = ("corpus.npy", "negatives.npz")


def _load(path: Path) -> np.ndarray:
    try:
        arr = load_npy(path, mmap=True)  # the header is checked against the file's size first
    except NpyFormatError as e:
        raise ConfigError(f"data.root: {e}") from None
    if arr.ndim != 2 or arr.dtype.kind != "f" or 0 in arr.shape:
        raise ConfigError(f"data.root: {path} must be a non-empty 2-D float array, got {arr.dtype} {arr.shape}")
    return arr


def build_pairs(config: JobConfig) -> DataSource:
    """The ``pairs`` data source (see the module docstring).

    Raises:
        contrastlab.train.ConfigError: naming ``data.root`` or the loss, for missing or inconsistent
            files, too few pairs for ``data.batch_size`` after holding out ``eval.n``, or mined
            negatives with a loss other than ``info_nce``/``dcl``.
    """
    from contrastlab.search.mining import MinedNegatives

    if config.data.root is None:
        raise ConfigError(f"data.root must name the folder holding {' and '.join(PAIRS_FILES)} for data.name 'pairs'")
    root = Path(config.data.root)
    missing = [f for f in PAIRS_FILES if not (root / f).is_file()]
    if missing:
        raise ConfigError(f"data.root {root} has no {', '.join(missing)}")
    anchors, positives = (_load(root / f) for f in PAIRS_FILES)
    if positives.shape != anchors.shape:
        raise ConfigError(
            f"data.root: {root / 'positives.npy'} has shape {positives.shape}, anchors.npy {anchors.shape}"
        )
    n, width = anchors.shape
    mined_present = [(root / f).is_file() for f in MINED_FILES]
    ids: np.ndarray | None = None
    corpus: np.ndarray | None = None
    if any(mined_present) and not all(mined_present):
        raise ConfigError(f"data.root: mined negatives need both {' and '.join(MINED_FILES)} in {root}")
    if all(mined_present):
        if config.loss.name not in ("info_nce", "dcl"):
            raise ConfigError(f"loss.name must be info_nce or dcl with mined negatives, got {config.loss.name!r}")
        corpus = _load(root / "corpus.npy")
        if corpus.shape[1] != width:
            raise ConfigError(f"data.root: {root / 'corpus.npy'} has F = {corpus.shape[1]}, anchors.npy F = {width}")
        try:
            ids = MinedNegatives.load(root / "negatives.npz").ids
        except ValueError as e:
            raise ConfigError(f"data.root: {e}") from None
        if ids.shape[0] != n or int(ids.max(initial=-1)) >= corpus.shape[0]:
            raise ConfigError(
                f"data.root: {root / 'negatives.npz'} has {ids.shape[0]} anchors and ids up to {int(ids.max(initial=-1))}; "
                f"need {n} anchors and ids below the {corpus.shape[0]} corpus rows"
            )
    held = config.eval.n
    train_rows = np.arange(n - held) if n > held else np.empty(0, dtype=np.int64)
    if ids is not None:
        train_rows = train_rows[(ids[train_rows] >= 0).all(axis=1)]
    if train_rows.size < config.data.batch_size:
        raise ConfigError(
            f"data.root: {root}: {train_rows.size} training pairs (after holding out eval.n = {held}"
            f"{' and dropping anchors short of mined negatives' if ids is not None else ''}) < "
            f"data.batch_size = {config.data.batch_size}"
        )
    sampler = EpochSampler(int(train_rows.size), config.data.batch_size, seed=config.train.seed)

    def rows_of(idx: np.ndarray) -> dict[str, Tensor]:
        return {
            "anchor": torch.from_numpy(np.asarray(anchors[idx], dtype=np.float32)),
            "positive": torch.from_numpy(np.asarray(positives[idx], dtype=np.float32)),
        }

    def batch_at(step: int) -> dict[str, Tensor]:
        idx = np.sort(train_rows[sampler(step).numpy()])  # sorted: memory-mapped reads in file order
        batch = rows_of(idx)
        if ids is not None and corpus is not None:
            uniq, where = np.unique(ids[idx], return_inverse=True)  # each corpus row read once, in order
            flat = np.asarray(corpus[uniq], dtype=np.float32)
            batch["negatives"] = torch.from_numpy(flat[where.reshape(len(idx), -1)])  # (n, K, F)
        return batch

    eval_rows = np.arange(max(n - held, 0), n)
    return DataSource(
        kind="vectors", input_shape=(width,), batch_at=batch_at, eval_batch=rows_of(eval_rows),
        train_size=int(train_rows.size),
    )  # fmt: skip
