"""A Ray Train worker loop that loses one rank mid-run: the test's own wrapper around the product's loop.

:func:`killing_loop` stands in for ``contrastlab.scale.train._train_loop``. In the first attempt of the group,
rank ``rank`` SIGKILLs its own process when the trainer draws the batch of step ``kill_at`` (after it has
taken steps ``0 .. kill_at - 1``), having first written its pid to ``marker``; every later attempt finds the
marker and runs the job unchanged. The kill happens at the same step on every run, however loaded the
machine, and no process outside the group has to find or time it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any


def killing_loop(loop_config: dict[str, Any], *, kill_at: int, rank: int, marker: str) -> None:
    """The product's worker loop, with rank ``rank`` of the first attempt killed at step ``kill_at``."""
    from contrastlab import distributed as cd
    from contrastlab.scale.train import run_worker
    from contrastlab.train.job import datasets as sources

    task = loop_config["task"]
    if cd.rank() == rank and not os.path.exists(marker):
        name = task.config.data.name
        build = sources.DATA_BUILDERS[name]

        def build_then_kill(config: Any) -> sources.DataSource:
            source = build(config)

            def batch_at(step: int) -> Any:
                if step == kill_at:
                    with open(marker, "w", encoding="utf-8") as f:
                        f.write(str(os.getpid()))
                    os.kill(os.getpid(), signal.SIGKILL)
                return source.batch_at(step)

            return dataclasses.replace(source, batch_at=batch_at)

        sources.DATA_BUILDERS[name] = build_then_kill  # this worker process only; it dies with the kill
    run_worker(task)
