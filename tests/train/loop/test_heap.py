"""The heap trim after each CPU step: called once per step when on, never when off, and no value changes."""

import ctypes.util
from dataclasses import replace

import pytest
import torch
from _tiny_run import CONFIG, batch_at, loss_fn, make_model

import contrastlab.train.loop.trainer as trainer
from contrastlab.train import fit
from contrastlab.train.loop.heap import trim_heap


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
