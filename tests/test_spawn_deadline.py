"""The test helper that spawns gloo ranks fails a group that outlives its deadline instead of hanging."""

from __future__ import annotations

import time

import pytest

from tests._spawn import spawn_ranks


def _sleeper(rank: int, seconds: float) -> None:
    if rank == 1:
        time.sleep(seconds)


def _raiser(rank: int) -> None:
    if rank == 0:
        raise ValueError("rank 0 says no")


def test_a_rank_that_outlives_the_deadline_is_killed_and_fails_the_test() -> None:
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"_sleeper: ranks \[(0, )?1\] of 2 still running"):
        spawn_ranks(_sleeper, (600.0,), 2, timeout=2.0)
    # rank 1 sleeps 600 s, so it is alive at the 2 s deadline; rank 0 may not have finished starting yet
    assert time.monotonic() - start < 300  # killed, not waited for


def test_a_rank_that_raises_reports_its_error() -> None:
    with pytest.raises(Exception, match="rank 0 says no"):
        spawn_ranks(_raiser, (), 2)


def test_ranks_that_finish_return_normally() -> None:
    spawn_ranks(_sleeper, (0.0,), 2)
