"""A command refused as the house promises: exit status 2, one line on stderr naming the problem, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from contrastlab.cli import main


def assert_refused(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str, out: Path) -> None:
    """``contrastlab ARGV`` exits 2 with one stderr line that holds ``expected`` and no traceback, and ``out`` is absent."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err and "Traceback" not in err
    assert not out.exists()
