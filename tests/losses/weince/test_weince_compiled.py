"""WEINCE's compiled streamed pass against the eager streamed sweep (the reference): loss, gradients and
statistics in every β mode, the gradient made ahead and the row-weighted backward sweep, a learnable τ with
the top-M terms, and float32 near the endpoint (the float64-refined shortfalls and the clamp). Each dtype's
first call compiles (one function for the forward, two with a gradient); the float64 forward comparison
stays in the fast suite, the rest are slow."""

import sys

import pytest
import torch

from contrastlab.losses import WEINCELoss, weince
from tests.losses.weince.test_weince_stream import GB, MODES, _assert_stats_equal, _run, _views

stream_module = sys.modules["contrastlab.losses.weince.stream"]


@pytest.fixture
def counted(monkeypatch):
    """Count the calls of the compiled block functions."""
    calls: list[str] = []
    real = stream_module.compiled_weince_block

    def wrapped():
        sums, grad_block = real()
        return (
            lambda *a: calls.append("sums") or sums(*a),
            lambda *a: calls.append("grad") or grad_block(*a),
        )

    monkeypatch.setattr(stream_module, "compiled_weince_block", wrapped)
    return calls


def _compare(za, zb, chunk, reduction, **kw):
    got = _run(za, zb, chunk, reduction, compiled=True, **kw)
    ref = _run(za, zb, chunk, reduction, **kw)
    for x, y in zip(got[:3], ref[:3], strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    _assert_stats_equal(got[3], ref[3])


def test_compiled_forward_equals_the_eager_sweep_fast(counted):
    """Float64, 2N = 42 views in blocks of 7 anchors, the paper's defaults, the forward alone (one compiled
    function): loss and statistics equal to 1e-12. The gradients: the slow tests below."""
    za, zb = _views(21, 5, seed=3)
    with torch.no_grad():
        got = weince(za, zb, chunk_size=7, min_tail=8, reduction="none", return_stats=True, compiled=True)
        ref = weince(za, zb, chunk_size=7, min_tail=8, reduction="none", return_stats=True)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
    _assert_stats_equal(got[1], ref[1])
    assert counted == ["sums"] * 6  # six blocks, no gradient block


@pytest.mark.slow
def test_compiled_pass_equals_the_eager_sweep_mean(counted):
    """The same with a mean: the gradient made ahead, both compiled functions on every block."""
    za, zb = _views(21, 5, seed=3)
    _compare(za, zb, 7, "mean", min_tail=8)
    assert counted == ["sums", "grad"] * 6


@pytest.mark.slow
@pytest.mark.parametrize("kw", MODES)
@pytest.mark.parametrize("reduction", ["sum", "none"])
@pytest.mark.parametrize("chunk", [4, 42])
def test_compiled_pass_equals_the_eager_sweep(kw, reduction, chunk):
    """Every β mode; a sum (made ahead) and per-row losses (the backward sweeps with the row weights)."""
    za, zb = _views(21, 5, seed=3)
    _compare(za, zb, chunk, reduction, min_tail=8, **kw)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kw", [{"temperature": "tensor"}, {"temperature": "tensor", "aux_top_m": 3, "beta_mode": "global_ema"}]
)
def test_compiled_pass_with_a_learnable_temperature(kw):
    """The τ-gradient (the per-anchor Σ p u of the compiled sums) equals the eager sweep's."""
    za, zb = _views(21, 5, seed=4)
    out = []
    for compiled in (True, False):
        t = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
        a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
        extra = {k: v for k, v in kw.items() if k != "temperature"}
        loss = weince(a, b, temperature=t, chunk_size=5, min_tail=8, global_beta=GB, compiled=compiled, **extra)
        out.append((loss.detach(), *torch.autograd.grad(loss, [a, b, t])))
    for x, y in zip(*out, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_float32_compiled_pass_near_the_endpoint_equals_float64():
    """Crowded float32 views (their shortfalls refined in float64, the clamp on) mixed with ordinary ones:
    within the streamed sweep's float32 bounds of float64 (``test_weince_stream.py``: 1e-5 on the loss,
    4e-4 on the gradients in relative norm)."""
    from tests.losses.weince.test_weince import _clustered

    za_c, zb_c, _ = _clustered(32, 32, 4, 0.001, seed=3)
    za_o, zb_o = _views(32, 32, seed=4, dtype=torch.float32)
    za, zb = torch.cat([za_c, za_o]), torch.cat([zb_c, zb_o])
    l32, g32a, g32b, _ = _run(za, zb, 5, "none", compiled=True)
    l64, g64a, g64b, _ = _run(za.double(), zb.double(), 5, "none")
    torch.testing.assert_close(l32.double(), l64, rtol=1e-5, atol=0)
    for x, y in ((g32a, g64a), (g32b, g64b)):
        assert float((x.double() - y).norm() / y.norm()) < 4e-4


@pytest.mark.slow
def test_float32_compiled_pass_equals_the_eager_sweep():
    """Ordinary float32 views: the loss to float32 rounding, gradients within 1e-5 in relative norm (the
    streamed-against-fused bound of ``test_weince_stream.py``)."""
    za, zb = _views(40, 16, seed=9, dtype=torch.float32)
    got, ref = _run(za, zb, 16, "mean", compiled=True), _run(za, zb, 16, "mean")
    torch.testing.assert_close(got[0], ref[0], rtol=1e-6, atol=1e-6)
    for x, y in zip(got[1:3], ref[1:3], strict=True):
        assert float((x - y).norm() / y.norm()) < 1e-5


def test_compiled_is_validated():
    za, zb = _views(4, 3, seed=0)
    with pytest.raises(TypeError, match="^compiled"):
        weince(za, zb, compiled=1)
    with pytest.raises(ValueError, match="^compiled"):
        WEINCELoss(compiled="yes")
    assert WEINCELoss(compiled=True).compiled and WEINCELoss(compiled="auto").compiled == "auto"
