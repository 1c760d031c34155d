"""Jobs in worker processes: results, failures, crashes, logs; Ctrl-C stops every worker and says what finished."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contrastlab.experiments._parallel import Job, run_in_workers
from contrastlab.progress import Board, Task
from tests.experiments._jobs import die, fail, square, with_a_child

ROOT = Path(__file__).resolve().parents[2]


def test_results_failures_and_crashes_are_reported_and_logged(tmp_path: Path) -> None:
    jobs = [
        Job("a", square, (3,), tmp_path / "a" / "output.log"),
        Job("b", fail, (), tmp_path / "b.log"),
        Job("c", die, (), tmp_path / "c.log"),
        Job("d", square, (5,), tmp_path / "d.log"),
        Job("e", with_a_child, (), tmp_path / "e.log"),  # an experiment may start processes of its own
    ]
    out = io.StringIO()
    board = Board("t", [Task(j.name) for j in jobs], workers=2, mode="plain", stream=out)
    with board:
        outcomes, interrupted = run_in_workers(jobs, board, 2)
    assert not interrupted
    assert {n: o.state for n, o in outcomes.items()} == {
        "a": "done",
        "b": "failed",
        "c": "failed",
        "d": "done",
        "e": "done",
    }
    assert outcomes["a"].result == 9 and outcomes["d"].result == 25 and outcomes["e"].result == 0
    assert outcomes["b"].error == "ValueError: bad input"
    assert "exited with code 3" in outcomes["c"].error
    assert (tmp_path / "a" / "output.log").read_text() == "squaring 3\n"  # the worker's output, not the parent's
    assert "about to fail" in (tmp_path / "b.log").read_text() and "Traceback" in (tmp_path / "b.log").read_text()
    assert board.names("done") == ["a", "d", "e"] and board.names("failed") == ["b", "c"]
    assert "failed b after" in out.getvalue()


def _wait_for(proc: subprocess.Popen[str], needle: str, lines: list[str], timeout: float = 120.0) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return
    proc.kill()
    raise AssertionError(f"{needle!r} never appeared; got {''.join(lines)}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("to_group", [False, True], ids=["parent", "process-group"])
def test_ctrl_c_stops_every_worker_and_says_what_finished(tmp_path: Path, to_group: bool) -> None:
    # to the parent alone (kill -INT), or to the whole process group, as a terminal's Ctrl-C is sent
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "experiments" / "_interrupt_run.py"), str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=to_group,
        preexec_fn=_sigint_as_usual,
    )
    try:
        lines: list[str] = []
        _wait_for(proc, "done quick", lines)
        deadline = time.monotonic() + 60
        while not (tmp_path / "slow.pid").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        slow_pid = int((tmp_path / "slow.pid").read_text())
        time.sleep(0.5)  # the third job may have started on the freed worker; it ends at once either way
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
        err = "".join(lines) + rest
        assert proc.returncode == 130, err
        assert "stopped slow after" in err and "Traceback" not in err
        assert "finished: quick" in err and "stopped: slow" in err
        # the slow worker's semaphore was released when it stopped (a worker killed by SIGTERM left it to the
        # shared resource tracker, which warned of "1 leaked semaphore objects" when the runner exited)
        assert "resource_tracker" not in err and "leaked" not in err, err
        deadline = time.monotonic() + 10
        while not _gone(slow_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(slow_pid), "the interrupted worker is still running"
    finally:  # a failed run leaves nothing behind: the runner, and the worker that never ends
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if (tmp_path / "slow.pid").is_file() and not _gone(int((tmp_path / "slow.pid").read_text())):
            os.kill(int((tmp_path / "slow.pid").read_text()), signal.SIGKILL)


def _sigint_as_usual() -> None:
    """In the child before exec: SIGINT's default action, even when the test runs where it is ignored (nohup, &)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
