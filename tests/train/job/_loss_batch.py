"""A sphere batch with the extra inputs a registered loss takes, for the tests that run every loss once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from contrastlab.train.job.config import JobConfig, takes_labels, takes_teacher_scores
from contrastlab.train.job.data_source import DataSource
from contrastlab.train.job.datasets import DATA_BUILDERS


def sphere_batch_for(fn: Callable[..., Any], config: JobConfig) -> tuple[DataSource, dict[str, torch.Tensor]]:
    """The sphere data of ``config`` and its first batch, with labels and teacher scores when ``fn`` takes them.

    Labels cycle through 4 classes; teacher scores are standard normal, ``(batch_size, 9)``, seed 0.
    """
    source = DATA_BUILDERS["sphere"](config)
    batch = source.batch_at(0)
    n = config.data.batch_size
    if takes_labels(fn):
        batch["labels"] = torch.arange(n) % 4
    if takes_teacher_scores(fn):
        batch["teacher_scores"] = torch.randn(n, 9, generator=torch.Generator().manual_seed(0))
    return source, batch
