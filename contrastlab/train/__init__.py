"""contrastlab.train: one training loop for every experiment, with exact resume.

``fit(model, loss_fn, batch_at, TrainConfig(...), out_dir=..., resume=...)`` trains; batch sources
are pure functions of the step (:class:`EpochSampler`, :func:`step_generator`); configs are frozen
dataclasses validated field by field (:mod:`contrastlab.config`).
"""

from contrastlab.config import (
    ConfigError,
    apply_overrides,
    dump_config,
    from_dict,
    load_config_file,
    to_dict,
)
from contrastlab.data.sampler import EpochSampler, step_generator
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.data_source import DataSource
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import run_job
from contrastlab.train.loop.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
from contrastlab.train.loop.config import OptimConfig, TrainConfig
from contrastlab.train.loop.grad_cache import cached_backward
from contrastlab.train.loop.objective import EmbeddingObjective
from contrastlab.train.loop.schedule import LRSchedule, lr_factor
from contrastlab.train.loop.trainer import Stateful, TrainResult, fit, resolve_device

__all__ = [
    "fit",
    "TrainConfig",
    "OptimConfig",
    "TrainResult",
    "EpochSampler",
    "step_generator",
    "lr_factor",
    "LRSchedule",
    "resolve_device",
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "ConfigError",
    "from_dict",
    "to_dict",
    "apply_overrides",
    "load_config_file",
    "dump_config",
    "JobConfig",
    "DataSource",
    "DATA_BUILDERS",
    "run_job",
    "EmbeddingObjective",
    "cached_backward",
    "Stateful",
]
