"""The progress board: plain lines, the live table, the mode choice, the overall estimate."""

from __future__ import annotations

import io
import sys

import pytest

from contrastlab.progress import PROGRESS_ENV, Board, Task, format_seconds, resolve_mode


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    monkeypatch.delenv("TERM", raising=False)


def test_format_seconds() -> None:
    assert [format_seconds(s) for s in (0, 59.4, 61, 3599, 3601)] == ["0:00", "0:59", "1:01", "59:59", "1:00:01"]


def test_mode_follows_the_stream_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_mode("auto", FakeTty()) == "live"
    assert resolve_mode("auto", io.StringIO()) == "plain"
    assert resolve_mode("plain", FakeTty()) == "plain"
    monkeypatch.setenv("TERM", "dumb")
    assert resolve_mode("auto", FakeTty()) == "plain"
    monkeypatch.setenv(PROGRESS_ENV, "live")
    assert resolve_mode("auto", io.StringIO()) == "live"
    monkeypatch.setenv(PROGRESS_ENV, "loud")
    with pytest.raises(ValueError, match=f"^{PROGRESS_ENV} must be one of"):
        resolve_mode("auto", io.StringIO())
    monkeypatch.delenv(PROGRESS_ENV)
    with pytest.raises(ValueError, match="^mode must be one of"):
        resolve_mode("fancy", io.StringIO())


def test_overall_estimate_replays_the_queue_on_the_workers() -> None:
    clock = Clock()
    tasks = [Task("a", 10.0), Task("b", 6.0), Task("c", 4.0), Task("d", 3.0)]
    board = Board("t", tasks, workers=2, mode="off", clock=clock)
    # a | b on two workers; c starts when b ends (6), d when a ends (10): a, b+c end at 10, d at 13
    assert board.remaining_s() == (13.0, True)
    board.start("a")
    board.start("b")
    clock.now += 5.0  # a has 5 s left, b 1 s: c on b's worker (1 + 4 = 5), d on the first free (5 + 3 = 8)
    assert board.remaining_s() == (8.0, True)
    clock.now += 7.0  # both past their estimates: they count as ending now (c and d side by side: 4 s), a lower bound
    assert board.remaining_s() == (4.0, False)


def test_plain_mode_prints_one_line_per_event_and_a_heartbeat() -> None:
    clock, out = Clock(), io.StringIO()
    board = Board(
        "demo", [Task("k-gap", 6.0, "the reference 2-core machine"), Task("x")], mode="plain", stream=out, clock=clock
    )
    with board:
        board.start("k-gap")
        clock.now += 65.0
        assert board.heartbeat() == "running: k-gap 1:05 of ~0:06; 1 waiting; ≥ 0:00 left"
        board.end("k-gap", "done")
        board.start("x")
        board.end("x", "failed", "ValueError: bad")
    lines = out.getvalue().splitlines()
    assert lines == [
        "[   0:00] demo: started k-gap (estimate 0:06, the reference 2-core machine)",
        "[   1:05] demo: done k-gap after 1:05",
        "[   1:05] demo: started x (no recorded duration)",
        "[   1:05] demo: failed x after 0:00: ValueError: bad",
    ]
    assert board.summary() == ["finished: k-gap (1:05)", "failed: x (0:00)"]


def test_plain_heartbeat_runs_on_its_own() -> None:
    out = io.StringIO()
    board = Board("demo", [Task("a", 1.0)], mode="plain", stream=out, heartbeat_s=0.05)
    with board:
        board.start("a")
        import time

        deadline = time.monotonic() + 30
        while "running: a" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "demo: running: a 0:00 of ~0:01; 0 waiting" in out.getvalue()


def test_live_mode_draws_the_table_and_prints_work_above_it(monkeypatch: pytest.MonkeyPatch) -> None:
    out = FakeTty()
    monkeypatch.setattr(sys, "stdout", FakeTty())  # the terminal the board shares with the work's output
    stdout, stderr = sys.stdout, sys.stderr
    board = Board("demo", [Task("audit", 20.0), Task("k-gap", 6.0)], mode="auto", stream=out)
    assert board.mode == "live"
    with board:
        assert sys.stdout is not stdout and not sys.stdout.isatty()
        assert sys.stderr is stderr  # pytest's capture: not a terminal, not the board's stream
        board.start("audit")
        print("a line printed by the work")
        board.end("audit", "done")
    assert sys.stdout is stdout and sys.stderr is stderr and stdout.getvalue() == ""
    text = out.getvalue()
    assert "a line printed by the work" in text
    final = text[text.rindex("audit") - 200 :]  # the last drawing of the board
    assert "done" in final and "k-gap" in final and "0:06" in final and "1 of 2 ended" in final


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="^tasks: names must be distinct"):
        Board("t", [Task("a"), Task("a")], mode="off")
    with pytest.raises(ValueError, match="^workers must be an int >= 1"):
        Board("t", [Task("a")], workers=0, mode="off")
    with pytest.raises(ValueError, match="^heartbeat_s must be > 0"):
        Board("t", [Task("a")], mode="off", heartbeat_s=0)
