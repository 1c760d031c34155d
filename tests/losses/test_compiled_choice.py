"""``compiled="auto"``: validation, the choice rule, determinism given the timings (a scripted clock), the
per-process cache, and SigLIP's, masked InfoNCE's and WEINCE's use of the choice. The compiled functions
are replaced by their uncompiled Python forms (the same arithmetic), so nothing here compiles; the compiled
kernels' equality with the eager passes is tested in ``test_siglip_compiled.py``,
``test_masked_ratio_compiled.py`` and ``test_weince_compiled.py``."""

from __future__ import annotations

import functools
import sys

import pytest
import torch

from contrastlab.losses import SigLIPLoss, compiled_choice, info_nce, masked_ratio, masked_ratio_compiled, siglip
from contrastlab.losses import siglip_compiled as sc
from contrastlab.losses.compiled_choice import check_compiled, clear_choices, compiled_is_faster, measured_choice
from tests.losses._scripted_clock import ScriptedClock

siglip_module = sys.modules["contrastlab.losses.siglip"]


@pytest.fixture(autouse=True)
def _fresh_choices():
    clear_choices()
    yield
    clear_choices()


def test_check_compiled():
    assert check_compiled(True) is True and check_compiled(False) is False and check_compiled("auto") == "auto"
    with pytest.raises(TypeError, match="^compiled"):
        check_compiled(1)
    with pytest.raises(ValueError, match="^compiled"):
        check_compiled("fast")
    with pytest.raises(ValueError, match="^compiled"):
        siglip(torch.randn(3, 2), torch.randn(3, 2), compiled="fast")
    with pytest.raises(ValueError, match="^compiled"):
        info_nce(torch.randn(3, 2), torch.randn(3, 2), compiled="yes")
    with pytest.raises(TypeError, match="^compiled"):
        SigLIPLoss(compiled=None)
    assert SigLIPLoss(compiled="auto").compiled == "auto"


def test_compiled_is_faster_by_the_margin():
    assert compiled_is_faster([1.0, 1.0, 1.2], [0.9, 0.95, 5.0], margin=0.05)  # medians 1.0 and 0.95
    assert not compiled_is_faster([1.0, 1.0, 1.2], [0.96, 0.96, 0.1], margin=0.05)
    assert compiled_is_faster([1.0], [1.0], margin=0.0)  # equal medians pass a zero margin
    with pytest.raises(ValueError, match="^eager"):
        compiled_is_faster([], [1.0])
    with pytest.raises(ValueError, match="^margin"):
        compiled_is_faster([1.0], [1.0], margin=1.0)


def test_measured_choice_is_deterministic_and_measured_once_per_key():
    made = []

    def make():
        made.append(1)
        return (lambda: None), (lambda: None)

    # alternating eager, compiled: eager 1.0 s, compiled 0.9 s (10% faster), three rounds
    clock = ScriptedClock([1.0, 0.9] * 3)
    assert measured_choice("k", make, repeats=3, timer=clock)
    assert measured_choice("k", make, timer=lambda: pytest.fail("measured twice"))
    assert made == [1]
    assert not measured_choice("k2", make, repeats=3, timer=ScriptedClock([1.0, 0.97] * 3))  # within 5%
    clear_choices()
    assert not measured_choice("k", make, repeats=1, timer=ScriptedClock([1.0, 1.5]))
    assert made == [1, 1, 1]


def _script_the_choice(monkeypatch, module, faster: bool) -> None:
    """The measurement in ``module`` sees eager 1 s and compiled 0.5 s (faster) or 1 s (not) per call."""
    clock = ScriptedClock([1.0, 0.5 if faster else 1.0] * 5)
    monkeypatch.setattr(module, "measured_choice", functools.partial(measured_choice, timer=clock))


def _uncompiled_siglip(monkeypatch, calls):
    def blocks():
        return (
            lambda neg: calls.append("loss") or sc._loss_block(neg),
            lambda neg: calls.append("grad") or sc._loss_grad_block_(neg),
        )

    monkeypatch.setattr(siglip_module, "compiled_blocks", blocks)


def _siglip_run(a, p, **kw):
    a, p = a.clone().requires_grad_(), p.clone().requires_grad_()
    t = torch.tensor(0.1, dtype=a.dtype, requires_grad=True)
    b = torch.tensor(-10.0, dtype=a.dtype, requires_grad=True)
    loss = siglip(a, p, temperature=t, bias=b, chunk_size=5, **kw)
    return (loss.detach(), *torch.autograd.grad(loss, [a, p, t, b]))


@pytest.mark.parametrize("faster", [True, False])
def test_siglip_auto_follows_the_measurement(monkeypatch, faster):
    """The first block is timed both ways (the scripted clock decides); the loss then runs the chosen pass:
    the compiled one (counted) equal to eager to 1e-12 in float64, or the eager one bit for bit."""
    calls: list[str] = []
    _uncompiled_siglip(monkeypatch, calls)
    _script_the_choice(monkeypatch, siglip_module, faster)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(13, 6, generator=g, dtype=torch.float64)
    p = a + 0.5 * torch.randn(13, 6, generator=g, dtype=torch.float64)
    got = _siglip_run(a, p, compiled="auto")
    timed = calls[:6]  # one untimed and five timed calls of the compiled pass
    assert timed == ["grad"] * 6
    ref = _siglip_run(a, p)
    if faster:
        assert calls[6:] == ["grad"] * 3  # the loss's three blocks
        for x, y in zip(got, ref, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    else:
        assert calls[6:] == []
        for x, y in zip(got, ref, strict=True):
            assert torch.equal(x, y)
    again = _siglip_run(a, p, compiled="auto")  # remembered: no second measurement
    assert len(calls) == (12 if faster else 6)
    for x, y in zip(again, got, strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("faster", [True, False])
def test_masked_info_nce_auto_follows_the_measurement(monkeypatch, faster):
    calls: list[int] = []

    def softmax():
        return lambda t: calls.append(len(t)) or masked_ratio_compiled._softmax_rows_(t)

    monkeypatch.setattr(masked_ratio, "compiled_softmax_rows", softmax)
    _script_the_choice(monkeypatch, masked_ratio, faster)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(256, 6, generator=g, dtype=torch.float64)
    p = a + 0.5 * torch.randn(256, 6, generator=g, dtype=torch.float64)
    label = torch.arange(256) // 2  # duplicates, few enough to be a list of entries (the compiled case)
    mask = label[:, None] == label[None, :]
    assert masked_ratio._mask_entries(mask, 0) is not None

    def run(**kw):
        x, y = a.clone().requires_grad_(), p.clone().requires_grad_()
        loss = info_nce(x, y, temperature=0.3, positive_mask=mask, **kw)
        return (loss.detach(), *torch.autograd.grad(loss, [x, y]))

    got = run(compiled="auto")
    assert len(calls) == (7 if faster else 6)  # six timing calls, then the loss's one block if chosen
    ref = run()
    for x, y in zip(got, ref, strict=True):
        if faster:
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)
        else:
            assert torch.equal(x, y)
    assert compiled_choice._CHOICES  # the choice is remembered in this process


@pytest.mark.parametrize("faster", [True, False])
def test_weince_auto_follows_the_measurement(monkeypatch, faster):
    """WEINCE's "auto" times the eager and the compiled streamed sweeps on the first block of anchors, then
    streams with the chosen one: the compiled (counted) equal to the eager sweep to 1e-12 in float64, or the
    eager one bit for bit."""
    from contrastlab.losses import weince
    from contrastlab.losses.weince import compiled as wc

    stream = sys.modules["contrastlab.losses.weince.stream"]
    calls: list[str] = []
    blocks = (
        lambda *a: calls.append("sums") or wc._block_sums(*a),
        lambda *a: calls.append("grad") or wc._gradient_block_(*a),
    )
    monkeypatch.setattr(stream, "compiled_weince_block", lambda: blocks)
    _script_the_choice(monkeypatch, stream, faster)
    g = torch.Generator().manual_seed(5)
    za = torch.randn(21, 5, generator=g, dtype=torch.float64)
    zb = 0.7 * za + 0.3 * torch.randn(21, 5, generator=g, dtype=torch.float64)

    def run(**kw):
        a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
        loss = weince(a, b, min_tail=8, **kw)
        return (loss.detach(), *torch.autograd.grad(loss, [a, b]))

    got = run(compiled="auto")
    timed = 6 * 2  # one untimed and five timed compiled sweeps of one block, each: sums and gradient block
    assert len(calls) == timed + (2 if faster else 0)
    ref = run(chunk_size=42)  # the eager streamed kernel, one block of the 42 views
    for x, y in zip(got, ref, strict=True):
        if faster:
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
        else:
            assert torch.equal(x, y)
