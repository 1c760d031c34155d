"""Module-level job bodies for the worker-runner tests (a spawned worker imports them by name)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def square(x: int) -> int:
    print(f"squaring {x}")
    return x * x


def fail() -> None:
    print("about to fail", file=sys.stderr)
    raise ValueError("bad input")


def die() -> None:
    os._exit(3)


def sleep_forever(pid_file: str) -> None:
    """Hold a named semaphore, as tqdm's write lock does in a Hugging Face experiment, and never end."""
    import multiprocessing

    lock = multiprocessing.RLock()  # registered with the resource tracker the worker shares with its parent
    Path(pid_file).write_text(str(os.getpid()))
    while lock:
        time.sleep(0.1)


def _child() -> None:
    print("child ran")


def with_a_child() -> int:
    import multiprocessing

    proc = multiprocessing.get_context("spawn").Process(target=_child)
    proc.start()
    proc.join()
    return int(proc.exitcode or 0)
