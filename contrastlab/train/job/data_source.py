"""What a dataset builder of ``contrastlab train`` returns: :class:`DataSource` (batches, held-out set, metadata).

The builders (:mod:`contrastlab.train.job.datasets`, :mod:`contrastlab.train.job.feature_pairs`,
:mod:`contrastlab.train.job.text_dataset`) return one; the runner (:mod:`contrastlab.train.job.runner`) trains on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = ["DataSource", "Kind"]

Kind = Literal["vectors", "images", "texts"]


@dataclass
class DataSource:
    """What a dataset builder returns.

    Attributes:
        kind: ``"vectors"`` (rows of ``input_shape = (in_dim,)``), ``"images"`` (``(C, H, W)``) or
            ``"texts"`` (``(L,)`` code-point rows of :mod:`contrastlab.data.text.codes`, L varying per batch).
        input_shape: the shape of one observation (the encoder's input); ``(0,)`` for texts (variable).
        batch_at: ``step -> batch``, a pure function of the step. A batch is a dict with
            ``"anchor"``, ``"positive"`` (``(N, *input_shape)``), optional ``"latent"`` (``(N, d)``, true
            latents), ``"labels"`` (``(N,)`` int64) and ``"negatives"`` (``(M, *input_shape)`` or
            ``(N, K, *input_shape)``).
        eval_batch: the held-out batch (same keys; images also carry ``"clean"``, the un-augmented
            images whose representations the linear probe reads).
        num_classes: number of classes of ``"labels"`` (0: the dataset gives no labels).
        fresh_negatives: whether the builder draws negatives beyond the batch (``negatives.kind``
            ``shared``/``per_anchor``).
        probe_train: un-augmented training rows ``{"clean": images, "labels": labels}`` for the linear
            probe (images as the dataset stores them, ``uint8`` or float in [0, 1]), or ``None``.
        provenance: where the data came from (file, versions, counts, checksum), recorded in
            ``results.json``; ``None`` when the config says it all.
        train_size: the number of training rows batches are drawn from (an epoch), or ``None`` when
            every batch is drawn fresh (the synthetic worlds); a negative queue may not be longer.
        teacher_scores: whether training batches carry ``"teacher_scores"`` (``(N, 1 + K)``, a teacher's
            scores of each anchor's positive and negatives) for the distillation losses.
    """

    kind: Kind
    input_shape: tuple[int, ...]
    batch_at: Callable[[int], dict[str, Tensor]]
    eval_batch: dict[str, Tensor]
    num_classes: int = 0
    fresh_negatives: bool = False
    probe_train: dict[str, Tensor] | None = None
    provenance: dict[str, Any] | None = None
    train_size: int | None = None
    teacher_scores: bool = False

    @property
    def in_dim(self) -> int:
        """The number of input features, the product of ``input_shape``."""
        return int(torch.Size(self.input_shape).numel())
