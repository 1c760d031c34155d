"""A timer for tests of measured choices: its successive timed calls last given durations."""

from __future__ import annotations


class ScriptedClock:
    """A timer whose successive timed calls (a pair of readings each) last the given durations, in order."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = list(durations)
        self.now = 0.0
        self.started = False

    def __call__(self) -> float:
        if self.started:  # the end of a timed call
            self.now += self.durations.pop(0)
        self.started = not self.started
        return self.now
