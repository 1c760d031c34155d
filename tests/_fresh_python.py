"""Run a snippet of Python in a fresh interpreter, so that what it imports stays out of the test process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root: the snippet's working directory, from which it imports ``contrastlab``."""


def run_fresh(code: str, timeout: float = 120.0) -> None:
    """Run ``python -c code`` at :data:`ROOT` and fail the test, with the tail of its stderr, if it exits non-zero."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
