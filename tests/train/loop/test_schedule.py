import math
import os
import signal
from pathlib import Path

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
        lr_factor(0, total_steps=3, schedule="step")
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


def _hf_lrs(total: int, warm: int, base: float) -> list[float]:
    """The learning rate of each update under transformers' get_linear_schedule_with_warmup."""
    transformers = pytest.importorskip("transformers")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=warm, num_training_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])  # the update's learning rate
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize(("total", "warm"), [(20, 5), (7, 0), (6, 6), (13, 1)])
def test_linear_is_hugging_faces_linear_schedule_with_warmup(total: int, warm: int) -> None:
    base = 0.3
    expected = _hf_lrs(total, warm, base)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    sched = LRSchedule(opt, total_steps=total, warmup_steps=warm, schedule="linear")
    # the same arithmetic (base × the same ratio of integers), so equal to the last bit
    assert [sched.apply(s) for s in range(total)] == pytest.approx(expected, rel=1e-15, abs=0)
    assert expected[0] == (0.0 if warm else base)


def test_linear_resumes_on_hugging_faces_sequence() -> None:
    total, warm, base, stop = 20, 5, 0.3, 8
    expected = _hf_lrs(total, warm, base)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    sched = LRSchedule(opt, total_steps=total, warmup_steps=warm, schedule="linear")
    got = [sched.apply(s) for s in range(stop)]
    state = sched.state_dict()
    fresh = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=opt.param_groups[0]["lr"])  # the decayed lr
    resumed = LRSchedule(fresh, total_steps=total, warmup_steps=warm, schedule="linear")
    resumed.load_state_dict(state)
    got += [resumed.apply(s) for s in range(stop, total)]
    assert got == pytest.approx(expected, rel=1e-15, abs=0)


def test_fit_with_linear_logs_hugging_faces_rates_across_a_resume(tmp_path: Path) -> None:
    import torch.nn.functional as F

    from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator

    total, warm, base, stop = 9, 3, 0.01, 4
    config = TrainConfig(
        steps=total, log_every=1, progress=False, device="cpu",
        optim=OptimConfig(lr=base, warmup_steps=warm, schedule="linear"),
    )  # fmt: skip

    def batch_at(step: int) -> torch.Tensor:
        return torch.randn(8, 3, generator=step_generator(0, step))

    def loss_fn(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(model(x), x.flip(1))

    def interrupt(model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        if step == stop:
            os.kill(os.getpid(), signal.SIGINT)

    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        fit(torch.nn.Linear(3, 3), loss_fn, batch_at, config, out_dir=tmp_path, on_step=interrupt)
    torch.manual_seed(0)
    result = fit(torch.nn.Linear(3, 3), loss_fn, batch_at, config, out_dir=tmp_path, resume=True)
    assert result.resumed_from == stop
    assert [r["step"] for r in result.history] == list(range(1, total + 1))
    assert [r["lr"] for r in result.history] == pytest.approx(_hf_lrs(total, warm, base), rel=1e-15, abs=0)
