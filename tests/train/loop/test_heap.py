"""The heap settings of a CPU run: called when on (the trim once per step), never when off, and no value changes."""

import ctypes.util
from dataclasses import replace

import pytest
import torch
from _tiny_run import CONFIG, batch_at, loss_fn, make_model

import contrastlab.train.loop.trainer as trainer
from contrastlab.config import ConfigError
from contrastlab.train import TrainConfig, fit
from contrastlab.train.loop.heap import set_mmap_threshold, trim_heap


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no C library to load")
def test_trim_heap_calls_glibc_where_it_has_malloc_trim() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    assert trim_heap() is hasattr(libc, "malloc_trim")


def test_fit_trims_once_per_step_when_on_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(trainer, "trim_heap", lambda: calls.append(1) or True)
    on = make_model()
    fit(on, loss_fn, batch_at, replace(CONFIG, trim_memory=True, device="cpu"))
    assert len(calls) == CONFIG.steps
    calls.clear()
    off = make_model()
    fit(off, loss_fn, batch_at, replace(CONFIG, trim_memory=False, device="cpu"))
    assert calls == []
    for (name, a), (_, b) in zip(on.state_dict().items(), off.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no C library to load")
def test_set_mmap_threshold_calls_glibc_where_it_has_mallopt() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    assert set_mmap_threshold(32 * 2**20) is hasattr(libc, "mallopt")


def test_set_mmap_threshold_refuses_a_threshold_below_one_byte() -> None:
    with pytest.raises(ValueError, match="nbytes must be >= 1"):
        set_mmap_threshold(0)


@pytest.mark.parametrize("mib", [-1, 33])
def test_mmap_threshold_mib_out_of_range_names_the_field(mib: int) -> None:
    with pytest.raises(ConfigError, match="mmap_threshold_mib must be in"):
        TrainConfig(mmap_threshold_mib=mib)


def test_fit_sets_the_mmap_threshold_once_when_on_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(trainer, "set_mmap_threshold", lambda n: calls.append(n) or True)
    on = make_model()
    fit(on, loss_fn, batch_at, replace(CONFIG, mmap_threshold_mib=4, device="cpu"))
    assert calls == [4 * 2**20]
    calls.clear()
    off = make_model()
    fit(off, loss_fn, batch_at, replace(CONFIG, device="cpu"))
    assert calls == []
    for (name, a), (_, b) in zip(on.state_dict().items(), off.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
