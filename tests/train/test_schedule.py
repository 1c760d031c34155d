import math

import pytest
import torch

from contrastlab.train import LRSchedule, lr_factor


def test_warmup_is_linear_and_reaches_one() -> None:
    got = [lr_factor(s, total_steps=100, warmup_steps=4) for s in range(6)]
    assert got == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_matches_closed_form() -> None:
    total, warm = 50, 10
    for s in range(total):
        expected = (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm)))
        assert lr_factor(s, total_steps=total, warmup_steps=warm, schedule="cosine") == pytest.approx(expected, abs=0)
    assert lr_factor(warm, total_steps=total, warmup_steps=warm, schedule="cosine") == 1.0
    half = warm + (total - warm) // 2
    assert lr_factor(half, total_steps=total, warmup_steps=warm, schedule="cosine") == pytest.approx(0.5)


def test_bad_schedule_and_step_are_named() -> None:
    with pytest.raises(ValueError, match="schedule"):
        lr_factor(0, total_steps=3, schedule="linear")
    with pytest.raises(ValueError, match="step"):
        lr_factor(-1, total_steps=3)


def test_lrschedule_sets_groups_and_round_trips() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.4)
    sched = LRSchedule(opt, total_steps=10, warmup_steps=2, schedule="cosine")
    assert sched.apply(0) == pytest.approx(0.2) and opt.param_groups[0]["lr"] == pytest.approx(0.2)
    sched.apply(5)
    other = LRSchedule(opt, total_steps=10, warmup_steps=2, schedule="cosine")  # sees the decayed lr
    other.load_state_dict(sched.state_dict())
    assert other.base_lrs == [0.4]
