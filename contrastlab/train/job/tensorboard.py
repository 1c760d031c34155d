"""TensorBoard beside ``metrics.jsonl``: :class:`LogConfig` (``log: {tensorboard: true}``) and :class:`TensorBoardLog`.

``metrics.jsonl`` stays the record of truth; TensorBoard gets a copy of every row as it is written, through
torch's own writer (:class:`torch.utils.tensorboard.SummaryWriter`, which needs the ``tensorboard``
package: the optional extra ``contrastlab[tensorboard]``). Each numeric entry of a row becomes a scalar at
the row's ``step``: ``train/loss``, ``train/lr``, ``train/grad_norm``, the loss's own logs under
``train/``, every held-out metric ``eval/<name>`` under its own name, and the loss's temperature τ
(learned or fixed) as ``train/temperature``. The event files go to ``RUN/tensorboard``
(``tensorboard --logdir RUN``).

A resumed run rewrites the rows after its checkpoint, so the writer is opened at the first row it gets
with ``purge_step`` at that row's step: TensorBoard then drops the interrupted run's events from that step
on, and the curves hold each step once, as ``metrics.jsonl`` does.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contrastlab.config import ConfigError, check_fields

__all__ = ["LogConfig", "TensorBoardLog", "TENSORBOARD_FOLDER", "tensorboard_installed"]

TENSORBOARD_FOLDER = "tensorboard"
"""The folder inside a run that holds TensorBoard's event files."""


def tensorboard_installed() -> bool:
    """Whether the ``tensorboard`` package that torch's writer needs is importable."""
    return importlib.util.find_spec("tensorboard") is not None


@dataclass(frozen=True)
class LogConfig:
    """Where a run's metrics go besides ``metrics.jsonl`` (always written)."""

    tensorboard: bool = False
    """also write every metrics row to TensorBoard event files in RUN/tensorboard (needs the extra
    contrastlab[tensorboard])"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.tensorboard and not tensorboard_installed():
            raise ConfigError("tensorboard: true needs the tensorboard package: pip install 'contrastlab[tensorboard]'")


def _tag(key: str) -> str:
    """A row's key as a TensorBoard tag: ``eval/…`` keeps its name, everything else goes under ``train/``."""
    return key if "/" in key else f"train/{key}"


class TensorBoardLog:
    """Writes metrics rows as TensorBoard scalars; a callable ``row -> None`` for :func:`~contrastlab.train.fit`.

    Args:
        run_dir: the run's folder; events go to ``run_dir/tensorboard``.
        temperature: returns τ at the time of a row (the learned value, or the fixed one), or None for a
            loss without one.
    """

    def __init__(self, run_dir: str | Path, temperature: Callable[[], float | None] | None = None) -> None:
        self.log_dir = Path(run_dir) / TENSORBOARD_FOLDER
        self.temperature = temperature
        self._writer: Any = None

    def __call__(self, row: Mapping[str, Any]) -> None:
        """Write each numeric entry of ``row`` (a ``metrics.jsonl`` row with ``step``) at ``row["step"]``."""
        step = int(row["step"])
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=step)
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(_tag(key), float(value), global_step=step)
        tau = self.temperature() if self.temperature is not None else None
        if tau is not None:
            self._writer.add_scalar("train/temperature", float(tau), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (nothing to do if no row came)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
