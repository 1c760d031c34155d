"""Spawn the gloo worker processes of a test, with a deadline.

``torch.multiprocessing.spawn(..., join=True)`` waits forever for a process that never exits (a rank stuck
in a collective, or in its interpreter's shutdown on a starved machine), which would hang the whole test run.
:func:`spawn_ranks` waits at most ``timeout`` seconds, then kills every process still alive and fails the
test, naming the worker and the ranks that had not finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch.multiprocessing as mp

#: Seconds a spawned group may take before the test fails: generous against a loaded 2-core machine,
#: where the slowest group (the 4-rank parity harness) takes about a minute, and far inside CI's limit.
DEADLINE_S = 900.0


def spawn_ranks(fn: Callable[..., Any], args: tuple[Any, ...], nprocs: int, timeout: float = DEADLINE_S) -> None:
    """Run ``fn(rank, *args)`` in ``nprocs`` spawned processes and wait for all of them.

    Raises:
        torch.multiprocessing.ProcessRaisedException: a process raised (its traceback is in the message).
        pytest.fail.Exception: the group did not finish within ``timeout`` seconds.
    """
    context = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(0.0, min(5.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            alive = [rank for rank, p in enumerate(context.processes) if p.is_alive()]
            for p in context.processes:
                if p.is_alive():
                    p.kill()
            for p in context.processes:
                p.join(10)
            pytest.fail(f"{fn.__name__}: ranks {alive} of {nprocs} still running after {timeout:.0f} s; killed")
