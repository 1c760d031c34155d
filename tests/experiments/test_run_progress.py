"""`contrastlab run` shows its progress: the experiment, elapsed time, an estimate from a recorded run; Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import contrastlab.experiments as experiments
from contrastlab import cli
from contrastlab.experiments._durations import REFERENCE_QUICK_S, recorded_seconds
from contrastlab.experiments.demo import PAPERS
from contrastlab.io import write_json_atomic
from contrastlab.progress import PROGRESS_ENV

REPO = Path(__file__).resolve().parents[2]
PLUGINS = str(REPO / "tests/experiments/plugins")
TINY_DEMO = ["--steps", "30", "--eval_size", "256", "--batch_size", "64", "--hidden", "32", "--k_gap_groups", "4"]


def test_reference_durations_are_of_the_demo_papers() -> None:
    # no stale entry; a paper added later has no estimate until its duration is measured on the reference machine
    assert set(REFERENCE_QUICK_S) <= set(PAPERS)
    assert all(s > 0 for s in REFERENCE_QUICK_S.values())


def test_recorded_seconds_reads_the_same_run_only(tmp_path: Path) -> None:
    cfg = {"steps": 12, "seed": 0}
    own = tmp_path / "k-gap"
    write_json_atomic(own / "results.json", {"name": "k-gap", "config": cfg, "quick": True, "runtime_s": 7.5})
    write_json_atomic(
        tmp_path / "k-gap-20260101-000000" / "results.json",
        {"name": "k-gap", "config": {**cfg, "seed": 1}, "quick": False, "runtime_s": 99.0},
    )
    assert recorded_seconds("k-gap", cfg, own, quick=True) == (7.5, f"the last run in {own}")
    # a new folder: the sibling whose config and quick flag match, else nothing (or the reference table)
    new = tmp_path / "k-gap-20260202-000000"
    assert recorded_seconds("k-gap", {**cfg, "seed": 1}, new, quick=False) == (
        99.0,
        f"the run in {tmp_path / 'k-gap-20260101-000000'}",
    )
    assert recorded_seconds("k-gap", {**cfg, "seed": 2}, new, quick=True) == (None, "")
    assert recorded_seconds("k-gap", {**cfg, "seed": 2}, new, quick=True, reference=True) == (
        REFERENCE_QUICK_S["k-gap"],
        "the reference 2-core machine",
    )
    (own / "results.json").write_text("{broken")  # unreadable records are skipped, never fatal
    assert recorded_seconds("k-gap", cfg, own, quick=True) == (None, "")


def test_run_prints_plain_progress_and_estimates_from_the_last_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, PLUGINS])
    monkeypatch.setenv(PROGRESS_ENV, "plain")
    out = tmp_path / "r"
    assert cli.main(["run", "tiny-fit", "--quick", "--out", str(out)]) == 0
    first = capsys.readouterr()
    assert "tiny-fit: started tiny-fit (no recorded duration)" in first.err
    assert "tiny-fit: done tiny-fit after" in first.err
    assert "results:" in first.out and "started" not in first.out  # stdout keeps the results only
    runtime = json.loads((out / "results.json").read_text())["runtime_s"]
    assert cli.main(["run", "tiny-fit", "--quick", "--out", str(out)]) == 0
    from contrastlab.progress import format_seconds

    expected = f"started tiny-fit (estimate {format_seconds(runtime)}, the last run in {out})"
    assert expected in capsys.readouterr().err


def test_demo_board_in_plain_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "plain")
    argv = ["run", "demo", "--quick", *TINY_DEMO, "--papers", "continuity-bound", "--workers", "1"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    lines = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[")]
    assert lines[0] == "demo: started audit (no recorded duration)"
    assert lines[1].startswith("demo: done audit after")
    assert lines[2] == "demo: started continuity-bound (estimate 0:04, the reference 2-core machine)"
    assert lines[3].startswith("demo: done continuity-bound after")
    assert (tmp_path / "continuity-bound" / "output.log").is_file()
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0  # again into the same folder: its own durations
    err = capsys.readouterr().err
    assert "started audit (estimate " in err and f"the last run in {tmp_path / 'audit'})" in err
    assert f"the last run in {tmp_path / 'continuity-bound'})" in err


def test_ctrl_c_stops_the_demo_and_says_what_finished(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", PROGRESS_ENV: "plain"}
    argv = ["run", "demo", "--quick", *TINY_DEMO, "--papers", "k-gap,continuity-bound", "--workers", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "contrastlab", *argv, "--out", str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_sigint_as_usual,
        start_new_session=True,  # its own process group: a failed test kills the demo and its workers at once
    )
    try:
        _interrupt_the_demo(proc, tmp_path)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _interrupt_the_demo(proc: subprocess.Popen[str], tmp_path: Path) -> None:
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if "started k-gap" in line or not line:
            break
    assert "started k-gap" in seen[-1], "".join(seen)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "demo interrupted; finished: audit" in err
    assert "stopped: k-gap" in err and "not started: continuity-bound" in err
    assert f"contrastlab report {tmp_path / 'audit'}" in err
    assert not (tmp_path / "k-gap" / "results.json").exists() and not (tmp_path / "report").exists()


def test_run_draws_the_live_board_on_stderr_and_keeps_stdout_for_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, PLUGINS])
    monkeypatch.setenv(PROGRESS_ENV, "live")  # as in a terminal; the test's stderr is not one
    assert cli.main(["run", "tiny-fit", "--quick", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "\x1b[" in captured.err  # drawn with terminal control codes
    last = captured.err[captured.err.rindex("tiny-fit ") :]  # the last drawing of the board's row
    assert "done" in last and "1 of 1 ended" in captured.err
    assert "started" not in captured.err  # no plain lines in live mode
    assert f"results: {tmp_path / 'results.json'}" in captured.out and "\x1b[" not in captured.out


def _sigint_as_usual() -> None:
    """In the child before exec: SIGINT's default action, even when the test runs where it is ignored (nohup, &)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
