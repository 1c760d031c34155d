"""Checkpoint selection by a dev metric, with early stopping: :class:`SelectConfig` and :class:`Selector`.

Every evaluation (``train.eval_every`` steps and the last step) scores the model on a dev set
(:mod:`contrastlab.train.job.dev_metrics`); the :class:`Selector` keeps the weights of the best evaluation so
far (``select.metric``, ``select.mode``) and counts the evaluations since. With ``select.patience`` the run
stops after that many evaluations without an improvement. The selector's whole state — best value, its
step, the count, the best weights — is saved in every checkpoint (it is the job's ``extra_state``), so a
resumed run selects and stops exactly as the uninterrupted one. At the end the job loads the selected
weights into the model it exports, and records the step they come from.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from contrastlab.config import ConfigError, check_fields

__all__ = ["DevConfig", "SelectConfig", "Selector", "RETRIEVAL_METRIC", "parse_metric"]

RETRIEVAL_METRIC = re.compile(r"^(ndcg|recall|mrr)@([1-9][0-9]*)$")
"""The dev retrieval metrics: ``ndcg@K``, ``recall@K`` (the share of the relevant documents in the top K,
as trec_eval's ``recall_K``) and ``mrr@K``."""

_EVAL_METRICS = ("loss", "alignment", "uniformity")


def parse_metric(name: str) -> tuple[str, int] | None:
    """``("ndcg", 10)`` for ``"ndcg@10"``; None for a held-out metric (``loss``, ``alignment``, ``uniformity``).

    Raises:
        contrastlab.train.ConfigError: naming ``metric`` for any other name (``select.metric`` in a job).
    """
    m = RETRIEVAL_METRIC.match(name)
    if m:
        return m.group(1), int(m.group(2))
    if name in _EVAL_METRICS:
        return None
    raise ConfigError(
        f"metric {name!r} is not a metric; known: ndcg@K, recall@K, mrr@K (K >= 1), {', '.join(_EVAL_METRICS)}"
    )


@dataclass(frozen=True)
class DevConfig:
    """The dev set the retrieval metrics are computed on."""

    path: str | None = None
    """a pairs file (.tsv/.csv/.jsonl: anchor = query, positive = a relevant document, negative columns =
    more documents) or, with kind task, a BEIR folder (a relative path is under data.root when that is set);
    null: the held-out rows of the training data"""
    kind: Literal["pairs", "task"] = "pairs"
    """pairs: `path` is a pairs file; task: a BEIR folder read with contrastlab.tasks.read_beir_task"""
    split: str = "train"
    """task: the qrels split"""
    part: Literal["dev", "all"] = "dev"
    """task: dev (the dev part of contrastlab.tasks.holdout, the queries a `part: train` source leaves out)
    or all (every query of the split)"""
    dev_fraction: float = 0.2
    """task: the share of queries holdout puts in the dev part"""
    seed: int = 0
    """task: the seed of holdout"""
    header: bool = False
    """pairs: the first line of a .tsv/.csv file names the columns"""

    def __post_init__(self) -> None:
        check_fields(self)
        if not 0 < self.dev_fraction < 1:
            raise ConfigError(f"dev_fraction must be in (0, 1), got {self.dev_fraction}")
        if self.kind == "task" and self.path is None:
            raise ConfigError("path must name a BEIR folder for kind 'task'")


@dataclass(frozen=True)
class SelectConfig:
    """Which checkpoint the run keeps and exports, and when it stops."""

    metric: str | None = None
    """the dev metric that picks the checkpoint: ndcg@K, recall@K, mrr@K on the dev set, or the held-out
    loss, alignment, uniformity; null: no selection (the last step is exported)"""
    mode: Literal["max", "min"] = "max"
    """max: a larger value is better (retrieval metrics); min: smaller (loss)"""
    patience: int = 0
    """stop after this many evaluations without an improvement (needs train.eval_every; 0: never)"""
    min_delta: float = 0.0
    """an improvement must beat the best by more than this"""
    dev: DevConfig = field(default_factory=DevConfig)
    """where the retrieval metrics are computed"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.metric is not None:
            parse_metric(self.metric)
        if self.patience < 0:
            raise ConfigError(f"patience must be >= 0, got {self.patience}")
        if self.patience and self.metric is None:
            raise ConfigError("patience needs metric (the metric that must improve)")
        if self.min_delta < 0:
            raise ConfigError(f"min_delta must be >= 0, got {self.min_delta}")

    @property
    def enabled(self) -> bool:
        """Whether a metric selects the checkpoint."""
        return self.metric is not None


class Selector:
    """The best evaluation so far and its weights; the job's ``extra_state["select"]``.

    Args:
        config: the metric, mode, patience and threshold.
        model: the model whose weights are kept (its ``state_dict``, copied to the CPU).
    """

    def __init__(self, config: SelectConfig, model: nn.Module) -> None:
        if config.metric is None:
            raise ValueError("config.metric must be set for a Selector")
        self.config, self.model = config, model
        self.best_value = math.nan
        self.best_step = -1
        self.since_best = 0
        self.last_step = -1
        self.best_weights: dict[str, Tensor] = {}

    def update(self, step: int, metrics: dict[str, float]) -> None:
        """Record the evaluation of ``step``; keep the model's weights when it is the best so far.

        An evaluation of a step already recorded (a resumed run evaluating its last step again) is ignored.

        Raises:
            ValueError: ``metrics`` has no finite value of ``config.metric`` (named).
        """
        if step <= self.last_step:
            return
        name = self.config.metric
        assert name is not None
        value = metrics.get(name)
        if value is None or not math.isfinite(value):
            raise ValueError(f"select.metric {name!r} is {value} at step {step}; the evaluation gave {sorted(metrics)}")
        self.last_step = step
        sign = 1.0 if self.config.mode == "max" else -1.0
        if self.best_step < 0 or sign * (value - self.best_value) > self.config.min_delta:
            self.best_value, self.best_step, self.since_best = float(value), step, 0
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        else:
            self.since_best += 1

    def should_stop(self) -> bool:
        """Whether ``patience`` evaluations in a row failed to improve."""
        return bool(self.config.patience) and self.since_best >= self.config.patience

    def load_best(self) -> int:
        """Load the selected weights into the model; return their step (-1: nothing evaluated yet, nothing loaded)."""
        if self.best_step >= 0:
            self.model.load_state_dict(self.best_weights)
        return self.best_step

    def state_dict(self) -> dict[str, Any]:
        """The best value, its step, the evaluations since, the last step evaluated and the best weights."""
        return {
            "best_value": self.best_value,
            "best_step": self.best_step,
            "since_best": self.since_best,
            "last_step": self.last_step,
            "best_weights": dict(self.best_weights),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.best_value = float(state["best_value"])
        self.best_step = int(state["best_step"])
        self.since_best = int(state["since_best"])
        self.last_step = int(state["last_step"])
        self.best_weights = {k: torch.as_tensor(v) for k, v in state["best_weights"].items()}
