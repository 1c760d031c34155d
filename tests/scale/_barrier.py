"""An encoder for the Ray encode's test that all actors work at once: its first call waits for the others.

:class:`BarrierEncoder`'s first call on each actor marks the actor (a file named by its pid in ``folder``) and
waits until ``actors`` actors have marked themselves, or fails after 60 s. An encode with it completes only
if Ray hands work to every actor while the first is still busy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np


class BarrierEncoder:
    """Waits, in its first call, until ``actors`` encoders (actors) have each begun a call; then embeds lengths."""

    def __init__(self, folder: Path, actors: int) -> None:
        self.folder, self.actors, self.waited = folder, actors, False

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not self.waited:
            (self.folder / str(os.getpid())).touch()
            deadline = time.monotonic() + 60
            while len(list(self.folder.iterdir())) < self.actors:
                if time.monotonic() > deadline:
                    raise RuntimeError("no other actor began a call in 60 s: one actor was handed all the work")
                time.sleep(0.02)
            self.waited = True
        return np.array([[len(t), t.count(" "), 1.0] for t in texts], dtype=np.float32)


class BarrierSource:
    """The recipe of :class:`BarrierEncoder` (what each actor loads)."""

    def __init__(self, folder: Path, actors: int) -> None:
        self.folder, self.actors = folder, actors

    def load(self) -> BarrierEncoder:
        return BarrierEncoder(self.folder, self.actors)

    def identity(self, encoder) -> dict:
        return {"name": "barrier", "dim": 3, "fingerprint": "barrier"}
