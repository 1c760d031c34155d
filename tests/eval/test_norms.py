"""Tests of the norm tools: the exact discrete recursion, heat, equilibrium, Spearman helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch import Tensor, nn

from contrastlab.eval import norms
from contrastlab.models import MLP


def _cosine_info_nce(za: Tensor, zp: Tensor, temperature: float = 0.2) -> Tensor:
    """Naive cosine InfoNCE with in-batch negatives (independent of contrastlab.losses)."""
    logits = F.normalize(za, dim=1) @ F.normalize(zp, dim=1).T / temperature
    return F.cross_entropy(logits, torch.arange(za.shape[0]))


# anchors and positives with repeats: item 1 is anchor twice and a positive; item 0 is anchor and positive
ANCHOR = torch.tensor([0, 1, 1, 2, 5])
POSITIVE = torch.tensor([3, 0, 4, 1, 5])


def test_recursion_identity_hand_built_sgd_step_exact_float64() -> None:
    """‖z'‖² = ‖z‖² + η²‖G‖²/‖z‖² per row, with G the sphere gradient of the row's *total* gradient."""
    g = torch.Generator().manual_seed(0)
    table = torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    loss = _cosine_info_nce(table[ANCHOR], table[POSITIVE])
    (grad,) = torch.autograd.grad(loss, table)
    eta = 0.7
    z, z_new = table.detach(), table.detach() - eta * grad
    r2 = (z**2).sum(1)
    sphere_g = r2.sqrt()[:, None] * grad  # G = ‖z‖ ∇_z L
    predicted = r2 + eta**2 * (sphere_g**2).sum(1) / r2
    measured = (z_new**2).sum(1)
    assert torch.allclose(measured, predicted, rtol=4e-16 * 8, atol=0)
    assert float(((z * grad).sum(1).abs() / (z.norm(dim=1) * grad.norm(dim=1).clamp_min(1e-300))).max()) < 1e-14
    assert measured[6] == r2[6]  # item 6 is absent: no gradient, norm unchanged
    assert torch.all(measured[:6] > r2[:6])


def test_repeated_rows_need_the_total_gradient_not_the_sum_of_squares() -> None:
    g = torch.Generator().manual_seed(1)
    table = torch.randn(7, 4, generator=g, dtype=torch.float64)
    za = table[ANCHOR].clone().requires_grad_(True)
    zp = table[POSITIVE].clone().requires_grad_(True)
    ga, gp = torch.autograd.grad(_cosine_info_nce(za, zp), (za, zp))
    total = torch.zeros_like(table).index_add_(0, ANCHOR, ga).index_add_(0, POSITIVE, gp)
    sum_sq = torch.zeros(7, dtype=torch.float64).index_add_(0, ANCHOR, (ga**2).sum(1))
    sum_sq.index_add_(0, POSITIVE, (gp**2).sum(1))
    eta = 0.5
    measured = ((table - eta * total) ** 2).sum(1)
    r2 = (table**2).sum(1)
    # as above: a few roundings per 4-term float64 sum, and z·G = 0 only to a few ulps (measured 3.1e-16)
    torch.testing.assert_close(measured, r2 + eta**2 * (total**2).sum(1), rtol=4e-16 * 8, atol=0)
    # item 1 occurs three times: Σ_k ‖g_k‖² is a different (wrong) heat for it
    assert abs(float(sum_sq[1] - (total[1] ** 2).sum())) > 1e-6
    wrong = r2 + eta**2 * sum_sq
    assert abs(float(measured[1] - wrong[1])) > 1e-8


def _train_table(opt_name: str, weight_decay: float, steps: int = 30) -> tuple[norms.ScaleInvariantProbe, float]:
    torch.manual_seed(0)
    emb = nn.Embedding(7, 4).double()
    probe = norms.ScaleInvariantProbe(lambda m: [m.weight], emb, rows=True)
    lr = 0.5
    opt = (
        torch.optim.SGD(emb.parameters(), lr=lr, weight_decay=weight_decay)
        if opt_name == "sgd"
        else torch.optim.Adam(emb.parameters(), lr=0.05, weight_decay=weight_decay)
    )
    gen = torch.Generator().manual_seed(3)
    for step in range(steps):
        a = torch.randint(0, 7, (5,), generator=gen)
        p = torch.randint(0, 7, (5,), generator=gen)
        opt.zero_grad(set_to_none=False)
        loss = _cosine_info_nce(emb(a), emb(p))
        loss.backward()
        opt.step()
        probe(emb, step, loss)
    return probe, lr


def test_probe_sgd_monotone_growth_and_recursion_over_many_steps() -> None:
    probe, lr = _train_table("sgd", 0.0)
    tr = probe.trace()
    assert tr.sq_norm.shape == (31, 7) and tr.grad_sq.shape == (30, 7)
    assert np.all(np.diff(tr.sq_norm, axis=0) >= 0)  # monotone: never shrinks
    assert np.all(tr.sq_norm[-1] > tr.sq_norm[0])
    assert norms.one_step_residual(tr, lr=lr).max() < 1e-14
    pred = norms.predicted_sq_norm(tr.sq_norm[0], tr.sphere_grad_sq, lr=lr)
    np.testing.assert_allclose(pred, tr.sq_norm, rtol=1e-13)
    # without decay the total growth is exactly η² Σ_t ‖∇L_t‖²
    np.testing.assert_allclose(tr.sq_norm[-1] - tr.sq_norm[0], lr**2 * tr.grad_sq.sum(0), rtol=1e-12)
    assert np.nanmax(np.abs(tr.cos_grad)) < 1e-12


def test_probe_sgd_weight_decay_is_exact_with_the_shrink_factor() -> None:
    probe, lr = _train_table("sgd", 0.1)
    tr = probe.trace()
    assert norms.one_step_residual(tr, lr=lr, weight_decay=0.1).max() < 1e-14
    assert norms.one_step_residual(tr, lr=lr, weight_decay=0.0).max() > 1e-3  # the factor matters


def test_probe_adam_departs_from_the_recursion() -> None:
    probe, _ = _train_table("adam", 0.0)
    tr = probe.trace()
    assert np.abs(tr.radial).max() > 1e-4  # Adam's update has a radial component
    np.testing.assert_allclose(tr.sq_norm[1:] - tr.sq_norm[:-1], tr.update_sq + tr.radial, rtol=1e-9, atol=1e-12)


def test_last_linear_layer_of_an_encoder_obeys_the_recursion() -> None:
    torch.manual_seed(0)
    enc = MLP(3, [8], 4).double()
    last = enc.net[-1]
    probe = norms.ScaleInvariantProbe(lambda m: [m.net[-1].weight, m.net[-1].bias], enc, rows=False)
    assert last.weight is probe.get_params(enc)[0]
    opt = torch.optim.SGD(enc.parameters(), lr=0.3)
    x = torch.randn(6, 3, dtype=torch.float64)
    for step in range(5):
        opt.zero_grad()
        loss = _cosine_info_nce(enc(x), enc(x + 0.1))
        loss.backward()
        opt.step()
        probe(enc, step, loss)
    tr = probe.trace()
    assert tr.sq_norm.shape == (6, 1)
    assert norms.one_step_residual(tr, lr=0.3).max() < 1e-14


def test_equilibrium_is_the_fixed_point_of_the_recursion() -> None:
    v = np.array([0.01, 0.5, 3.0])
    lr, lam = 0.2, 0.05
    traj = norms.predicted_sq_norm(np.ones(3), np.tile(v, (4000, 1)), lr=lr, weight_decay=lam)
    np.testing.assert_allclose(traj[-1], norms.equilibrium_sq_norm(v, lr=lr, weight_decay=lam), rtol=1e-10)
    approx = norms.equilibrium_sq_norm(v, lr=lr, weight_decay=lam, exact=False)
    np.testing.assert_allclose(approx, np.sqrt(lr * v / (2 * lam)), rtol=1e-15)
    with pytest.raises(ValueError, match="^weight_decay"):
        norms.equilibrium_sq_norm(v, lr=lr, weight_decay=0.0)


def test_item_heat_meter_sums_sphere_gradients_per_view() -> None:
    z = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    items = torch.tensor([2, 0, 2, 1])
    meter = norms.ItemHeatMeter(3)
    meter.attach(z, items)
    loss = _cosine_info_nce(z[:2], z[2:])
    loss.backward()
    per_row = (z.detach() ** 2).sum(1) * (z.grad**2).sum(1)
    torch.testing.assert_close(meter.heat, torch.stack([per_row[1], per_row[3], per_row[0] + per_row[2]]))
    assert meter.count.tolist() == [1, 1, 2]


def test_spearman_matches_scipy_with_ties() -> None:
    x = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 4.0, 4.0, 0.5, 7.0, 6.0])
    y = np.array([2.0, 1.0, 3.0, 3.0, 6.0, 5.0, 2.0, 0.1, 9.0, 9.0])
    assert norms.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-15)
    assert norms.spearman(torch.tensor(x), -y) == pytest.approx(-stats.spearmanr(x, y).statistic, abs=1e-15)
    with pytest.raises(ValueError, match="^y"):
        norms.spearman(x, y[:3])


def test_spearman_bootstrap_interval_and_correlations() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200)
    y = x + 0.8 * rng.standard_normal(200)
    rho, lo, hi = norms.spearman_bootstrap(x, y, n_boot=500, rng=np.random.default_rng(1))
    assert lo < rho < hi and 0.5 < lo and hi < 0.95
    assert norms.spearman_bootstrap(x, y, n_boot=500, rng=np.random.default_rng(1)) == (rho, lo, hi)
    out = norms.norm_correlations(x, {"up": y, "down": -y}, n_boot=200, rng=np.random.default_rng(2))
    assert out["up"][0] == pytest.approx(-out["down"][0])
