"""Run named jobs in worker processes, a few at a time, reporting to a progress board; Ctrl-C stops them all.

Each job runs in its own spawned process (a fresh interpreter: no state shared with the parent),
with its stdout and stderr going to a log file, so that the parent's board owns the terminal and two
workers never print into each other. The workers ignore SIGINT: a Ctrl-C reaches the parent, which
sends SIGTERM to the running workers (the trainer writes its checkpoint at the end of the running
step and exits), waits for them, marks them ``stopped`` and returns with ``interrupted=True``. A
worker that dies without reporting (killed, out of memory) is ``failed`` with its exit code. Workers are
not daemons, so an experiment may start processes of its own; none outlives :func:`run_in_workers`.

In a worker, SIGTERM raises ``KeyboardInterrupt`` (after the trainer's own handler has written its
checkpoint and passed the signal on), so the job unwinds and the process exits through Python's shutdown
rather than dying on the signal. That matters for the named semaphores a job creates (tqdm's write lock is a
``multiprocessing.RLock``, and a spawned worker's default context is ``spawn``): they are registered with the
resource tracker the worker shares with the parent, and only a normal exit unregisters them; a worker killed
by the signal left them behind, and the tracker warned of "leaked semaphore objects" when the parent exited.
Only a worker still running after ``grace_s`` is killed outright.
"""

from __future__ import annotations

import os
import queue as queue_lib
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from contrastlab.progress import Board

__all__ = ["Job", "Outcome", "run_in_workers"]

_POLL_S = 0.25
"""seconds between checks of the workers while waiting for a report"""


@dataclass(frozen=True)
class Job:
    """One unit of work: ``target(*args)`` in a worker process, output to ``log``."""

    name: str
    target: Callable[..., Any]
    """a module-level function (it is pickled into the worker); its return value must pickle too"""
    args: tuple[Any, ...]
    log: Path
    """file receiving the worker's stdout and stderr (its folder is created)"""


@dataclass
class Outcome:
    """How a job ended."""

    name: str
    state: str
    """``done``, ``failed``, ``stopped`` (by Ctrl-C) or ``waiting`` (never started)"""
    seconds: float = 0.0
    result: Any = None
    error: str = ""


def _worker(job: Job, reports: Any) -> None:
    """Worker body: ignore SIGINT, send output to the log, run, report ``(name, state, result, error, s)``.

    ``state`` is ``done``, ``failed``, or ``stopped`` when the job raised ``KeyboardInterrupt`` (the trainer's
    own SIGINT handler, installed over the ignored one, stops after its checkpoint).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)  # the parent's stop: unwind and exit normally (module docstring)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the parent while it started us
    job.log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(job.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    t0 = time.perf_counter()
    try:
        result = job.target(*job.args)
    except KeyboardInterrupt:  # the parent's SIGTERM, or a training loop that saw the terminal's Ctrl-C itself
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping already: report, then exit normally
        reports.put((job.name, "stopped", None, "interrupted", time.perf_counter() - t0))
        return
    except BaseException as e:  # reported to the parent; the other jobs still run
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        traceback.print_exc()
        reports.put((job.name, "failed", None, f"{type(e).__name__}: {e}", time.perf_counter() - t0))
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stop that comes now would only lose the report
    reports.put((job.name, "done", result, "", time.perf_counter() - t0))


def _interrupt(signum: int, frame: Any) -> None:
    """A worker's SIGTERM handler: stop the job as a Ctrl-C would."""
    raise KeyboardInterrupt


def run_in_workers(
    jobs: Sequence[Job], board: Board, workers: int, *, grace_s: float = 30.0
) -> tuple[dict[str, Outcome], bool]:
    """Run ``jobs`` in order, ``workers`` at a time, marking each start and end on ``board``.

    Args:
        jobs: the jobs, in the order they start (their names are tasks of ``board``).
        board: the progress board.
        workers: processes at once (>= 1).
        grace_s: after Ctrl-C, seconds a worker gets to stop on SIGTERM before it is killed.

    Returns:
        ``({name: Outcome}, interrupted)``; after a Ctrl-C no worker is left running.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    ctx = get_context("spawn")
    reports: Any = ctx.Queue()
    pending = deque(jobs)
    running: dict[str, Any] = {}
    outcomes = {j.name: Outcome(j.name, "waiting") for j in jobs}

    def record(msg: tuple[str, str, Any, str, float]) -> None:
        name, state, result, error, seconds = msg
        outcomes[name] = Outcome(name, state, seconds, result, error)
        board.end(name, "done" if state == "done" else "stopped" if state == "stopped" else "failed", error)
        proc = running.pop(name, None)
        if proc is not None:
            proc.join()

    def drain(timeout: float) -> None:
        try:
            record(reports.get(timeout=timeout) if timeout > 0 else reports.get_nowait())
            while True:
                record(reports.get_nowait())
        except queue_lib.Empty:
            pass

    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.popleft()
                proc = ctx.Process(target=_worker, args=(job, reports), name=f"contrastlab-{job.name}")
                # SIGINT blocked while the worker starts (it inherits the mask) and until it is on the books:
                # a Ctrl-C meanwhile waits, then stops it like the others; the worker unblocks it once ignored
                old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                try:
                    proc.start()
                    running[job.name] = proc
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
                board.start(job.name)
            drain(_POLL_S)
            for name, proc in list(running.items()):
                if not proc.is_alive():
                    drain(1.0)  # a report sent just before exiting
                    if name in running:
                        running.pop(name).join()
                        error = f"the worker exited with code {proc.exitcode} without reporting"
                        outcomes[name] = Outcome(name, "failed", error=error)
                        board.end(name, "failed", error)
        return outcomes, False
    except KeyboardInterrupt:
        drain(0)
        for proc in running.values():
            proc.terminate()
        deadline = time.monotonic() + grace_s
        try:
            for proc in running.values():
                proc.join(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            pass
        for name, proc in running.items():
            if proc.is_alive():
                proc.kill()
                proc.join()
            outcomes[name] = Outcome(name, "stopped", error="interrupted")
            board.end(name, "stopped", "interrupted")
        running.clear()
        return outcomes, True
    finally:
        for proc in running.values():  # an exception other than Ctrl-C: leave nothing running
            proc.kill()
            proc.join()
        reports.close()
