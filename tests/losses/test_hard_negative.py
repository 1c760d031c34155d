"""Hard-negative InfoNCE (Robinson et al. 2021) against a loop written from the paper, its limits and contract.

The loop (``tests/losses/reference.py: debiased_loop``) weighs each negative by e^{βS} directly with
``math.exp``; the function takes two row log-sum-exps on the kernels. float64, 1e-10 relative (the two
differ only in rounding); τ = 0.5 and β ≤ 2 keep the loop's e^{(1+β)S} ≤ e^6 well inside float64.
"""

import pytest
import torch

from contrastlab.losses import HardNegativeInfoNCELoss, debiased_info_nce, hard_negative_info_nce, info_nce
from tests.losses._debiased_checks import TAU, assert_dense_equals_tiled, assert_gradcheck, assert_matches_loop
from tests.losses._debiased_inputs import LAYOUTS, layout_inputs, mixed_noise


def _loss(a, p, negs, layout, **kw):
    return hard_negative_info_nce(a, p, negs, simclr=layout == "simclr", **kw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("tau_plus", "beta"), [(0.1, 0.5), (0.1, 1.0), (0.0, 2.0), (0.3, 1.0)])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_matches_the_paper_loop(layout, tau_plus, beta, chunk_size):
    a, p, negs = layout_inputs(layout, 9, seed=21)
    assert_matches_loop(_loss, a, p, negs, layout, tau_plus=tau_plus, beta=beta, chunk_size=chunk_size)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_clamp_branch_for_some_rows_and_not_others(layout, chunk_size):
    a, p, negs = layout_inputs(layout, 10, seed=22, noise=mixed_noise(10))
    clamped = assert_matches_loop(_loss, a, p, negs, layout, tau_plus=0.4, beta=1.0, chunk_size=chunk_size)
    assert any(clamped) and not all(clamped), clamped  # both branches are exercised by these inputs


@pytest.mark.parametrize("layout", LAYOUTS)
def test_beta_zero_is_the_debiased_loss(layout):
    a, p, negs = layout_inputs(layout, 8, seed=23)
    kw = {"temperature": TAU, "tau_plus": 0.1, "simclr": layout == "simclr", "reduction": "none"}
    torch.testing.assert_close(
        hard_negative_info_nce(a, p, negs, beta=0.0, **kw), debiased_info_nce(a, p, negs, **kw), rtol=0, atol=0
    )
    # and continuously: d/dβ of the log reweighted mean is E_{q_{1+β}}[S] − E_{q_β}[S] ≤ max S − min S ≤ 2/τ,
    # so β = 1e-9 moves log g by at most 4e-9 (times 1/(1 − τ⁺e^{r}) ≈ 1 away from the clamp): far below
    # 1e-7 relative. This exercises the β > 0 path (two sweeps) against the one-sweep path.
    torch.testing.assert_close(
        hard_negative_info_nce(a, p, negs, beta=1e-9, **kw), debiased_info_nce(a, p, negs, **kw), rtol=1e-7, atol=0
    )


@pytest.mark.parametrize("layout", ["in-batch", "shared", "per-anchor"])
def test_beta_zero_tau_plus_zero_is_info_nce(layout):
    a, p, negs = layout_inputs(layout, 8, seed=24)
    torch.testing.assert_close(
        hard_negative_info_nce(a, p, negs, temperature=TAU, tau_plus=0.0, beta=0.0),
        info_nce(a, p, negs, temperature=TAU),
        rtol=1e-12,
        atol=0,
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loss_grows_with_beta(layout):
    # d/dβ log(Σ e^{(1+β)S}/Σ e^{βS}) = E_{q_{1+β}}[S] − E_{q_β}[S] ≥ 0 (a tilted mean grows with the tilt),
    # and the clamp and log(e^{S⁺} + g) are nondecreasing in the estimate: every row's loss is nondecreasing
    # in β. The slack 1e-12 covers rounding where two values are equal (clamped rows).
    a, p, negs = layout_inputs(layout, 9, seed=25)
    rows = [
        _loss(a, p, negs, layout, temperature=TAU, tau_plus=0.1, beta=b, reduction="none")
        for b in (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
    ]
    for lo, hi in zip(rows[:-1], rows[1:], strict=True):
        assert bool((hi >= lo - 1e-12).all())
    assert bool((rows[-1] > rows[0]).any())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_gradcheck_float64(layout, chunk_size):
    a, p, negs = layout_inputs(layout, 5, seed=26, noise=0.5)
    assert_gradcheck(_loss, a, p, negs, layout, tau_plus=0.2, beta=1.5, chunk_size=chunk_size)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dense_equals_tiled_with_gradients(layout):
    a, p, negs = layout_inputs(layout, 13, seed=27, noise=0.5)
    assert_dense_equals_tiled(_loss, a, p, negs, layout, temperature=0.3, tau_plus=0.1, beta=1.0)


def test_module_equals_function_and_shows_its_hyperparameters():
    a, p, _ = layout_inputs("in-batch", 6, seed=28)
    m = HardNegativeInfoNCELoss(temperature=0.3, tau_plus=0.05, beta=0.7)
    torch.testing.assert_close(m(a, p), hard_negative_info_nce(a, p, temperature=0.3, tau_plus=0.05, beta=0.7))
    assert "beta=0.7" in repr(m) and "tau_plus=0.05" in repr(m)


@pytest.mark.parametrize(
    ("kw", "error", "message"),
    [
        ({"beta": -0.5}, ValueError, "^beta must be >= 0, got -0.5"),
        ({"beta": float("inf")}, ValueError, "^beta must be finite"),
        ({"beta": "1"}, TypeError, "^beta must be a real number"),
        ({"beta": True}, TypeError, "^beta must be a real number"),
        ({"tau_plus": 1.5}, ValueError, r"^tau_plus must be in \[0, 1\)"),
    ],
)
def test_bad_hyperparameters_raise_named_errors(kw, error, message):
    a, p, _ = layout_inputs("in-batch", 4, seed=29)
    for gather in (False, True):  # gather=True: through the agree-before-collective check
        with pytest.raises(error, match=message):
            hard_negative_info_nce(a, p, gather=gather, **kw)
    with pytest.raises(error, match=message):
        HardNegativeInfoNCELoss(**kw)


@pytest.mark.parametrize(("beta", "tiles"), [(0.0, False), (1.0, True)])
def test_dense_logits_beyond_the_budget_are_tiled(monkeypatch, beta, tiles):
    # The kept dense logits and their gradient of N = 16 float64 rows take 2·16·16·8 = 4,096 bytes per
    # sweep (tiled.dense_bytes). With a budget of 4,096 bytes β = 0 (one sweep) stays dense; β > 0 (two
    # sweeps, half the budget each) is tiled: no N × N buffer beyond the budget, whatever N is.
    from contrastlab.losses import tiled

    calls = {"dense": 0, "tiled": 0}
    dense, tiled_lse = tiled.dense_row_lse, tiled.tiled_lse

    def count(kind, fn):
        def wrapped(*args, **kwargs):
            calls[kind] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(tiled, "DENSE_MEMORY_BUDGET_BYTES", 4096)
    monkeypatch.setattr(tiled, "dense_row_lse", count("dense", dense))
    monkeypatch.setattr(tiled, "tiled_lse", count("tiled", tiled_lse))
    a, p, _ = layout_inputs("in-batch", 16, seed=30)
    loss = hard_negative_info_nce(a.requires_grad_(), p, beta=beta)
    loss.backward()
    assert (calls["tiled"] > 0, calls["dense"] > 0) == (tiles, not tiles), calls
