"""What is running, for how long, and how long is left: a board of named tasks, live or as plain lines.

A :class:`Board` holds tasks (an experiment, the demo's audit) that wait, run, and end ``done``,
``failed`` or ``stopped``. Each may carry an estimate of its duration (from a recorded run; see
:func:`contrastlab.experiments.durations.recorded_seconds`). The board is shown one of two ways:

* ``live`` — a table redrawn twice a second (rich) while the tasks run: each task's state, elapsed time
  and estimate, and the time left overall. While it is shown, ``sys.stdout`` and ``sys.stderr`` (those
  that write to the same terminal) print above it line by line and say they are not a terminal, so a
  progress bar of the work underneath (the trainer's) stays off instead of fighting the board for the screen;
* ``plain`` — one line per event (a task starts or ends) and a line every ``heartbeat_s`` seconds
  listing what runs, for logs that are not a terminal (CI).

``mode="auto"`` (the default) picks ``live`` when the stream is a terminal and ``plain`` otherwise; the
environment variable ``CONTRASTLAB_PROGRESS`` (``live``, ``plain`` or ``off``) overrides it.

The overall estimate replays the queue: each running task ends at its estimate (never before now),
and each waiting one starts on the first worker free, in order. A task without an estimate counts as
zero, and one running past its estimate as ending now, so the figure is then a lower bound, marked ``≥``.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

__all__ = ["Board", "Task", "resolve_mode", "format_seconds", "PROGRESS_ENV"]

Mode = Literal["auto", "live", "plain", "off"]
State = Literal["waiting", "running", "done", "failed", "stopped"]

PROGRESS_ENV = "CONTRASTLAB_PROGRESS"
"""Environment variable forcing the display: ``live``, ``plain`` or ``off``."""

_MODES = ("auto", "live", "plain", "off")


def format_seconds(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) of a non-negative duration, rounded to the second."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def resolve_mode(mode: str, stream: TextIO) -> Literal["live", "plain", "off"]:
    """The display to use: ``$CONTRASTLAB_PROGRESS`` if set, else ``mode``, ``auto`` by the stream.

    Raises:
        ValueError: ``mode`` (or the environment variable) is not ``auto``, ``live``, ``plain`` or ``off``.
    """
    env = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if env and env not in _MODES:
        raise ValueError(f"{PROGRESS_ENV} must be one of {', '.join(_MODES)}, got {env!r}")
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    chosen = env if env and env != "auto" else mode
    if chosen == "auto":
        return "live" if _isatty(stream) and os.environ.get("TERM") != "dumb" else "plain"
    return chosen  # type: ignore[return-value]


@dataclass
class Task:
    """One row of the board."""

    name: str
    estimate_s: float | None = None
    """expected duration in seconds (None: no recorded duration)"""
    estimate_from: str = ""
    """where the estimate comes from, e.g. ``a previous run in runs/demo/k-gap``"""
    state: State = "waiting"
    started: float | None = None
    ended: float | None = None
    note: str = ""
    """the error of a failed task, or why it stopped"""

    def elapsed(self, now: float) -> float:
        """Seconds since the task started (to its end once ended; 0 while waiting)."""
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else now) - self.started


class _LinesAbove(io.TextIOBase):
    """A text stream that prints each complete line above the live board; not a terminal."""

    def __init__(self, console: Any, original: TextIO) -> None:
        super().__init__()
        self._console = console
        self._original = original
        self._buffer = ""
        self._lock = threading.Lock()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self._original.fileno()

    def write(self, s: str) -> int:
        from rich.text import Text

        with self._lock:
            self._buffer += s
            *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._console.print(Text.from_ansi(line), soft_wrap=True)
        return len(s)

    def flush(self) -> None:
        with self._lock:
            line, self._buffer = self._buffer, ""
        if line:
            self.write(line + "\n")


class Board:
    """Named tasks, their state, elapsed time and estimates, shown live or as plain lines.

    Use as a context manager around the work; call :meth:`start` and :meth:`end` as tasks run.

    Args:
        title: the board's heading, e.g. ``demo``.
        tasks: the tasks, in the order they will run.
        workers: tasks that run at once (for the overall estimate).
        mode: ``auto``, ``live``, ``plain`` or ``off`` (see :func:`resolve_mode`).
        stream: where the board goes (default ``sys.stderr``; stdout keeps the results).
        heartbeat_s: plain mode: seconds between the lines listing what runs (> 0).
        clock: monotonic seconds (a test may pass its own).

    Raises:
        ValueError: a bad ``mode``, duplicate task names, ``workers`` < 1 or ``heartbeat_s`` <= 0.
    """

    def __init__(
        self,
        title: str,
        tasks: list[Task],
        *,
        workers: int = 1,
        mode: str = "auto",
        stream: TextIO | None = None,
        heartbeat_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"tasks: names must be distinct, got {names}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        if not heartbeat_s > 0:
            raise ValueError(f"heartbeat_s must be > 0, got {heartbeat_s!r}")
        self.title = title
        self.tasks = {t.name: t for t in tasks}
        self.workers = workers
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.mode = resolve_mode(mode, self.stream)
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.RLock()
        self._live: Any = None
        self._saved: tuple[Any, Any] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # ------------------------------------------------------------------------------------- state

    def start(self, name: str) -> None:
        """Mark ``name`` running from now."""
        with self._lock:
            t = self.tasks[name]
            t.state, t.started, t.ended = "running", self._clock(), None
            est = (
                f"estimate {format_seconds(t.estimate_s)}, {t.estimate_from}"
                if t.estimate_s is not None
                else "no recorded duration"
            )
            self._line(f"started {name} ({est})")

    def end(self, name: str, state: Literal["done", "failed", "stopped"], note: str = "") -> None:
        """Mark ``name`` ended (``done``, ``failed`` or ``stopped``) now, with an optional note."""
        with self._lock:
            t = self.tasks[name]
            now = self._clock()
            if t.started is None:
                t.started = now
            t.state, t.ended, t.note = state, now, note
            detail = f": {note}" if note else ""
            self._line(f"{state} {name} after {format_seconds(t.elapsed(now))}{detail}")

    def names(self, *states: State) -> list[str]:
        """The tasks in any of ``states``, in board order."""
        with self._lock:
            return [n for n, t in self.tasks.items() if t.state in states]

    def remaining_s(self) -> tuple[float, bool]:
        """``(seconds until every task should have ended, whether every unfinished task has an estimate)``."""
        with self._lock:
            now = self._clock()
            active = [t for t in self.tasks.values() if t.state in ("running", "waiting")]
            free = sorted(
                max(0.0, (t.estimate_s or 0.0) - t.elapsed(now)) for t in self.tasks.values() if t.state == "running"
            )
            free = (free + [0.0] * self.workers)[: max(self.workers, len(free))]
            free.sort()
            # a task without an estimate, or running past it, makes the figure a lower bound
            known = all(t.estimate_s is not None and t.elapsed(now) <= t.estimate_s for t in active)
            for t in self.tasks.values():
                if t.state == "waiting":
                    free[0] += t.estimate_s or 0.0
                    free.sort()
            return (max(free) if free else 0.0), known

    def summary(self) -> list[str]:
        """What finished, failed, stopped and never started: one line each (empty groups left out)."""
        with self._lock:
            now = self._clock()
            lines = []
            for state, label in (
                ("done", "finished"),
                ("failed", "failed"),
                ("stopped", "stopped"),
                ("running", "still running"),
                ("waiting", "not started"),
            ):
                group = [t for t in self.tasks.values() if t.state == state]
                if not group:
                    continue
                if state in ("waiting",):
                    items = ", ".join(t.name for t in group)
                else:
                    items = ", ".join(f"{t.name} ({format_seconds(t.elapsed(now))})" for t in group)
                lines.append(f"{label}: {items}")
            return lines

    # ----------------------------------------------------------------------------------- display

    def _stamp(self) -> str:
        return f"[{format_seconds(self._clock() - self._t0):>7}] {self.title}:"

    def _line(self, text: str) -> None:
        if self.mode == "plain":
            print(f"{self._stamp()} {text}", file=self.stream, flush=True)

    def heartbeat(self) -> str:
        """The plain-mode line listing the running tasks, how many wait, and the time left overall."""
        with self._lock:
            now = self._clock()
            running = []
            for t in self.tasks.values():
                if t.state == "running":
                    est = f" of ~{format_seconds(t.estimate_s)}" if t.estimate_s is not None else ""
                    running.append(f"{t.name} {format_seconds(t.elapsed(now))}{est}")
            waiting = len(self.names("waiting"))
            left, known = self.remaining_s()
            return (
                f"running: {', '.join(running) or 'nothing'}; {waiting} waiting; "
                f"{'' if known else '≥ '}{format_seconds(left)} left"
            )

    def table(self) -> Any:
        """The board as a rich ``Table`` (what live mode draws)."""
        from rich.table import Table

        with self._lock:
            now = self._clock()
            left, known = self.remaining_s()
            done = len(self.names("done", "failed", "stopped"))
            caption = (
                f"{done} of {len(self.tasks)} ended · {format_seconds(now - self._t0)} elapsed · "
                f"{'≥ ' if not known else ''}{format_seconds(left)} left (estimated) · Ctrl-C stops"
            )
            t = Table(title=self.title, caption=caption, title_justify="left", caption_justify="left", min_width=72)
            for col, justify in (("task", "left"), ("state", "left"), ("elapsed", "right"), ("estimate", "right")):
                t.add_column(col, justify=justify)  # type: ignore[arg-type]
            style = {"running": "bold cyan", "done": "green", "failed": "bold red", "stopped": "yellow"}
            for task in self.tasks.values():
                state = task.state + (f": {task.note}" if task.note and task.state == "failed" else "")
                t.add_row(
                    task.name,
                    f"[{style.get(task.state, 'dim')}]{_escape(state[:80])}[/]",
                    format_seconds(task.elapsed(now)) if task.started is not None else "",
                    format_seconds(task.estimate_s) if task.estimate_s is not None else "—",
                )
            return t

    def __enter__(self) -> Board:
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(
                self,
                console=console,
                refresh_per_second=2,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
            self._saved = (sys.stdout, sys.stderr)
            # only the streams that share the board's screen: a stdout redirected to a file keeps its lines
            if sys.stdout is self.stream or _isatty(sys.stdout):
                sys.stdout = _LinesAbove(console, sys.stdout)  # type: ignore[assignment]
            if sys.stderr is self.stream or _isatty(sys.stderr):
                sys.stderr = _LinesAbove(console, sys.stderr)  # type: ignore[assignment]
        elif self.mode == "plain":
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="contrastlab-board", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            assert self._saved is not None
            for s in (sys.stdout, sys.stderr):
                s.flush()
            sys.stdout, sys.stderr = self._saved
            self._live.refresh()
            self._live.stop()
            self._live = None
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None

    def __rich__(self) -> Any:
        return self.table()

    def _tick(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            if self.names("running"):
                self._line(self.heartbeat())


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
