"""``contrastlab train`` that pauses when it draws the batch of step STOP_AT, so the parent can SIGKILL it.

Run as a script: ``python _queue_job.py STOP_AT ARG...`` runs ``contrastlab ARG...`` with the ``sphere``
builder wrapped: drawing the batch of step STOP_AT prints "ready" and sleeps. Nothing else changes, so
the run up to the kill is the run of the plain command.
"""

from __future__ import annotations

import sys
import time

import torch

import contrastlab.train.job.datasets as sources
from contrastlab import cli
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.data_source import DataSource

if __name__ == "__main__":
    stop_at = int(sys.argv[1])
    sphere = sources.DATA_BUILDERS["sphere"]

    def paused(config: JobConfig) -> DataSource:
        source = sphere(config)
        inner = source.batch_at

        def batch_at(step: int) -> dict[str, torch.Tensor]:
            if step == stop_at:
                print("ready", flush=True)
                time.sleep(120)
            return inner(step)

        source.batch_at = batch_at
        return source

    sources.DATA_BUILDERS["sphere"] = paused
    sys.exit(cli.main(sys.argv[2:]))
