"""Checkpoint rotation: ``checkpoint.pt`` exists and is complete at every instant, whenever a save is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contrastlab.train.loop.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

# A child process saves step 1, then saves step 2 with os.link / os.replace patched to SIGKILL the process
# at one point of the rotation, before that call runs.
_CHILD = """
import os, signal, sys
from contrastlab.train.loop.checkpoint import save_checkpoint

directory, point = sys.argv[1], sys.argv[2]
save_checkpoint({"step": 1, "model": {"w": __import__("torch").ones(3)}}, directory)
real_link, real_replace = os.link, os.replace

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def link(src, dst, *args, **kwargs):
    if point == "before-link":
        die()
    return real_link(src, dst, *args, **kwargs)

def replace(src, dst, *args, **kwargs):
    if point == "before-previous" and str(dst).endswith("checkpoint.prev.pt"):
        die()
    if point == "before-install" and str(dst).endswith("checkpoint.pt"):
        die()
    return real_replace(src, dst, *args, **kwargs)

os.link, os.replace = link, replace
save_checkpoint({"step": 2, "model": {"w": __import__("torch").full((3,), 2.0)}}, directory)
"""


def _state(step: int) -> dict:
    return {"step": step, "model": {"w": torch.full((3,), float(step))}}


@pytest.mark.parametrize("point", ["before-link", "before-previous", "before-install"])
def test_a_save_killed_inside_the_rotation_leaves_the_newest_complete_checkpoint(tmp_path: Path, point: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), point], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL  # it was killed where the test said, not before
    # the step-1 checkpoint is still in place, complete, and it is what a resume loads
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 1
    state = latest_checkpoint(tmp_path)
    assert state is not None and state["step"] == 1
    strays = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert strays  # the killed save left its temporaries behind ...
    if point == "before-install":  # ... and had already kept step 1 as the previous checkpoint
        assert load_checkpoint(tmp_path / "checkpoint.prev.pt")["step"] == 1
    else:
        assert not (tmp_path / "checkpoint.prev.pt").exists()
    save_checkpoint(_state(3), tmp_path)  # ... which the next save removes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.prev.pt", "checkpoint.pt"]
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 3
    assert load_checkpoint(tmp_path / "checkpoint.prev.pt")["step"] == 1


def test_rotation_keeps_the_previous_checkpoint_and_the_new_one_is_another_file(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        save_checkpoint(_state(step), tmp_path)
    newest, previous = tmp_path / "checkpoint.pt", tmp_path / "checkpoint.prev.pt"
    assert load_checkpoint(newest)["step"] == 3 and load_checkpoint(previous)["step"] == 2
    assert not os.path.samefile(newest, previous)  # the hard link was only the old file's second name
    assert oct(newest.stat().st_mode & 0o777) == oct(0o644)


def test_without_hard_links_the_previous_checkpoint_is_a_copy(tmp_path: Path, monkeypatch) -> None:
    save_checkpoint(_state(1), tmp_path)

    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    save_checkpoint(_state(2), tmp_path)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 2
    assert load_checkpoint(tmp_path / "checkpoint.prev.pt")["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.prev.pt", "checkpoint.pt"]
