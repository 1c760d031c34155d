"""Several text sources in one run: :class:`SourceSchedule`, which source each training step draws from."""

from __future__ import annotations

__all__ = ["SourceSchedule"]


class SourceSchedule:
    """Which source each step draws from, and how many batches that source gave before it.

    ``round_robin``: step s goes to source ``s mod S``. ``proportional``: to the source furthest behind its
    share — the one maximising ``(s + 1)·w_i / Σw − c_i`` (c_i: its steps so far; ties to the lower index),
    so after any number of steps each source's count is within one of its share. The schedule is a pure
    function of the step (a resumed run recomputes the counts of the steps before it, O(S) per step).

    Args:
        weights: one positive weight per source.
        mode: ``"round_robin"`` or ``"proportional"``.
    """

    def __init__(self, weights: list[float], mode: str) -> None:
        if not weights or any(w <= 0 for w in weights):
            raise ValueError(f"weights must be positive, one per source, got {weights}")
        if mode not in ("round_robin", "proportional"):
            raise ValueError(f"mode must be round_robin or proportional, got {mode!r}")
        total = sum(weights)
        self.shares = [w / total for w in weights]
        self.mode = mode
        self._picks: list[tuple[int, int]] = []  # (source, its local step) of each step so far
        self._counts = [0] * len(weights)

    def at(self, step: int) -> tuple[int, int]:
        """``(source, local step)`` of 0-based ``step``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        s = len(self.shares)
        if self.mode == "round_robin":
            return step % s, step // s
        while len(self._picks) <= step:
            t = len(self._picks) + 1
            i = max(range(s), key=lambda j: (t * self.shares[j] - self._counts[j], -j))
            self._picks.append((i, self._counts[i]))
            self._counts[i] += 1
        return self._picks[step]
