"""Which source each step draws from: every prefix of the schedule within one batch of each source's share."""

from __future__ import annotations

from contrastlab.data.text.source_schedule import SourceSchedule


def test_schedule_keeps_every_prefix_within_one_of_its_share() -> None:
    sched = SourceSchedule([3.0, 1.0, 2.0], "proportional")
    counts = [0, 0, 0]
    for step in range(200):
        i, local = sched.at(step)
        assert local == counts[i]  # the source's own batch counter
        counts[i] += 1
        assert all(abs(c - (step + 1) * w / 6) < 1 for c, w in zip(counts, (3, 1, 2), strict=True))
    assert SourceSchedule([3.0, 1.0, 2.0], "proportional").at(150) == sched.at(150)  # a fresh one agrees
