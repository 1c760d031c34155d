"""WEINCE: reduction to NT-Xent/InfoNCE, stop-gradient statistics, the per-anchor fits against
numpy.polyfit and a per-row loop written from §2.3 of the reference, hand cases, the Weibit law,
float64 gradcheck, state handling and the bad-input contract."""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contrastlab.losses import WEINCELoss, info_nce, nt_xent, weince
from contrastlab.losses.weince import (
    ENDPOINT_SHORTFALL,
    GlobalBetaConfig,
    anchor_tail_stats,
    global_tail_beta,
    rowwise_ols,
    tail_size,
    update_beta_ema,
)
from tests.losses.weince._fixed_statistics import FIXED_STATISTICS, FROZEN_GLOBAL_BETA, float64_views


def _views(n: int, d: int, seed: int, dtype=torch.float32, corr: float = 0.7):
    g = torch.Generator().manual_seed(seed)
    za = torch.randn(n, d, generator=g, dtype=dtype)
    zb = corr * za + (1 - corr) * torch.randn(n, d, generator=g, dtype=dtype)
    return za, zb


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- naive reference, one row at a time (§2.3)


def naive_row_stats(s_neg: np.ndarray, *, tail_frac=0.1, min_tail=32, eps=1e-6):
    """Steps 1–2 of §2.3 for one anchor, written directly from the text with numpy.polyfit."""
    k_neg = len(s_neg)
    k_tail = min(max(10, min(int(max(min_tail, round(tail_frac * k_neg))), k_neg)), k_neg)
    top = np.sort(s_neg)[::-1][:k_tail]
    rho = max(1.0 - top[0], eps)
    burn = max(1, k_tail // 20)
    x = np.log(np.maximum(1.0 - top, eps))[burn:]
    f = np.maximum(np.arange(1, k_tail + 1) / (k_tail + 1.0), eps)[burn:]
    y_w, y_g = np.log(f), np.log(-np.log(f))
    n = len(x)
    out = {}
    for name, y in (("w", y_w), ("g", y_g)):
        b, a = np.polyfit(x, y, 1)
        sse = max(float(np.sum((y - (a + b * x)) ** 2)), 1e-12)
        out[name] = (b, sse)
    b_w, sse_w = out["w"]
    b_g, sse_g = out["g"]
    r2 = min(max(1.0 - sse_w / max(np.sum((y_w - y_w.mean()) ** 2), 1e-12), 0.0), 1.0)
    if b_w <= 0:
        sse_w += 1e6
    if b_g >= 0:
        sse_g += 1e6
    aic_w = n * math.log(sse_w / n) + 4.0
    aic_g = n * math.log(sse_g / n) + 4.0
    return {"rho": rho, "beta_hat": max(b_w, 0.0), "r2": r2, "delta_aic": aic_g - aic_w}


def naive_stats(neg: np.ndarray, *, q=0.2, kappa_rho=10.0, kappa_aic=1.0, margin=2.0, **kw):
    rows = [naive_row_stats(r, **kw) for r in neg]
    rho = np.array([r["rho"] for r in rows])
    rho0 = np.sort(rho)[int(round(q * (len(rho) - 1)))]
    lam = np.array(
        [
            _sigmoid(kappa_rho * (math.log(rho0) - math.log(r["rho"])))
            * _sigmoid(kappa_aic * (r["delta_aic"] - margin))
            for r in rows
        ]
    )
    return rows, rho0, lam


def _simclr_negatives(za: torch.Tensor, zb: torch.Tensor) -> np.ndarray:
    """Each of the 2N views' 2N − 2 negative cosines, by explicit loops over (i, j)."""
    z = torch.nn.functional.normalize(torch.cat([za, zb]).double(), dim=1).numpy()
    n2 = z.shape[0]
    n = n2 // 2
    return np.array([[z[i] @ z[j] for j in range(n2) if j != i and j != (i + n) % n2] for i in range(n2)])


# ---------------------------------------------------------------- reductions to the softmax losses


@pytest.mark.parametrize("n", [2, 3, 17, 64])
@pytest.mark.parametrize("tau", [0.5, 0.1, 0.07, 2.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lambda_zero_is_nt_xent_bit_for_bit(n, tau, dtype):
    za, zb = _views(n, 8, seed=n, dtype=dtype)
    for reduction in ("mean", "none"):
        got = weince(za, zb, temperature=tau, fixed_lambda=0.0, reduction=reduction)
        want = nt_xent(za, zb, temperature=tau, reduction=reduction)
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("tau", [0.5, 0.07])
@pytest.mark.parametrize("negs", [None, "shared", "per_anchor"])
def test_mixing_path_with_vanishing_lambda_matches_the_softmax_losses(tau, negs):
    """λ = 1e-30 runs the Weibit-mixing code (not the λ ≡ 0 shortcut): loss and gradients are NT-Xent's
    (InfoNCE's) to rounding."""
    za, zb = _views(24, 8, seed=7, dtype=torch.float64)
    g = torch.Generator().manual_seed(8)
    n = None
    if negs == "shared":
        n = torch.randn(30, 8, generator=g, dtype=torch.float64)
    elif negs == "per_anchor":
        n = torch.randn(24, 9, 8, generator=g, dtype=torch.float64)
    a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
    got = weince(a, b, n, temperature=tau, fixed_lambda=1e-30, reduction="none")
    a2, b2 = za.clone().requires_grad_(), zb.clone().requires_grad_()
    want = (
        nt_xent(a2, b2, temperature=tau, reduction="none")
        if n is None
        else info_nce(a2, b2, n, temperature=tau, reduction="none")
    )
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    w = torch.linspace(0.5, 1.5, got.shape[0], dtype=torch.float64)
    for x, y in zip(
        torch.autograd.grad((got * w).sum(), [a, b]), torch.autograd.grad((want * w).sum(), [a2, b2]), strict=True
    ):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


def test_huge_margin_drives_lambda_to_zero():
    za, zb = _views(32, 8, seed=1)
    loss, stats = weince(za, zb, margin=1e9, return_stats=True)
    assert torch.all(stats.tail.lam == 0)
    assert torch.equal(loss, nt_xent(za, zb))


@pytest.mark.parametrize("shape", ["shared", "per_anchor"])
def test_lambda_zero_with_explicit_negatives_is_info_nce(shape):
    za, zb = _views(12, 6, seed=3)
    g = torch.Generator().manual_seed(4)
    negs = torch.randn(20, 6, generator=g) if shape == "shared" else torch.randn(12, 15, 6, generator=g)
    got = weince(za, zb, negs, temperature=0.1, fixed_lambda=0.0, reduction="none")
    want = info_nce(za, zb, negs, temperature=0.1, reduction="none")
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_default_statistics_are_not_trivial():
    """On correlated views the default gate is neither all-off nor all-on (the test above is not vacuous)."""
    za, zb = _views(128, 16, seed=5)
    loss, stats = weince(za, zb, return_stats=True)
    lam = stats.tail.lam
    assert 0.0 < float(lam.min()) < float(lam.max()) and float(lam.max()) > 0.5
    assert not torch.allclose(loss, nt_xent(za, zb))


# ---------------------------------------------------------------- the statistics


def test_rowwise_ols_equals_polyfit_row_by_row():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 30, generator=g, dtype=torch.float64)
    y = torch.randn(30, generator=g, dtype=torch.float64)
    slope, intercept, sse = rowwise_ols(x, y)
    for r in range(7):
        b, a = np.polyfit(x[r].numpy(), y.numpy(), 1)
        resid = y.numpy() - (a + b * x[r].numpy())
        assert slope[r].item() == pytest.approx(b, rel=1e-10)
        assert intercept[r].item() == pytest.approx(a, rel=1e-10, abs=1e-12)
        assert sse[r].item() == pytest.approx(float(resid @ resid), rel=1e-9)


def test_per_anchor_fits_equal_polyfit_inside_the_loss():
    """β̂_i reported by the loss = polyfit slope of log F̂ on the anchor's own log shortfalls."""
    za, zb = _views(40, 8, seed=6, dtype=torch.float64)
    _, stats = weince(za, zb, return_stats=True)
    neg = _simclr_negatives(za, zb)
    for i in range(0, 80, 7):
        assert stats.tail.beta_hat[i].item() == pytest.approx(naive_row_stats(neg[i])["beta_hat"], rel=1e-8)


@pytest.mark.parametrize("n,q,margin", [(40, 0.2, 2.0), (9, 0.5, 0.0), (70, 0.0, 6.0)])
def test_vectorised_statistics_equal_the_naive_loop(n, q, margin):
    za, zb = _views(n, 10, seed=n, dtype=torch.float64)
    _, stats = weince(za, zb, q=q, margin=margin, kappa_rho=5.0, kappa_aic=0.5, return_stats=True)
    rows, rho0, lam = naive_stats(_simclr_negatives(za, zb), q=q, margin=margin, kappa_rho=5.0, kappa_aic=0.5)
    t = stats.tail
    np.testing.assert_allclose(t.rho.numpy(), [r["rho"] for r in rows], rtol=1e-12)
    np.testing.assert_allclose(t.beta_hat.numpy(), [r["beta_hat"] for r in rows], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(t.r2.numpy(), [r["r2"] for r in rows], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(t.delta_aic.numpy(), [r["delta_aic"] for r in rows], rtol=1e-7, atol=1e-6)
    assert float(t.rho0) == pytest.approx(rho0, rel=1e-12)
    np.testing.assert_allclose(t.lam.numpy(), lam, rtol=1e-7, atol=1e-12)


def test_statistics_match_in_float32_too():
    za, zb = _views(48, 10, seed=8)
    _, stats = weince(za, zb, return_stats=True)
    _, _, lam = naive_stats(_simclr_negatives(za, zb))
    np.testing.assert_allclose(stats.tail.lam.numpy(), lam, atol=2e-3)


def _clustered(n: int, d: int, clusters: int, sigma: float, seed: int):
    """Float32 views around ``clusters`` unit centres: every view's hardest negatives crowd s = 1."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(clusters, d, generator=g, dtype=torch.float64), dim=1)
    c = centres[torch.arange(n) % clusters]
    noise = torch.randn(3, n, d, generator=g, dtype=torch.float64)
    return (c + sigma * noise[0]).float(), (c + sigma * noise[1]).float(), (c + sigma * noise[2]).float()


@pytest.mark.parametrize("negs", [None, "shared", "per_anchor"])
@pytest.mark.parametrize("sigma", [0.01, 0.001])
def test_float32_statistics_near_the_endpoint_equal_float64(negs, sigma):
    # Clustered views: every row's largest negative cosine is within ENDPOINT_SHORTFALL of 1 (asserted),
    # 1 − s down to ~1e-4. In float32 those rows' tails are recomputed from float64 cosines, so the
    # statistics are the float64 computation on the same (float32-representable) inputs, up to float64
    # rounding: a cosine errs by ≤ D·2⁻⁵³ ≈ 4e-15 (D = 32), x = log(1 − s) by ≤ 4e-15/1e-5 = 4e-10, and
    # the fits (S_xx of order 1, n_eff ≥ 15 points) pass that on to β̂ and λ at the same order; ΔAIC =
    # n·log(SSE_G/SSE_W) multiplies it by n/SSE, bounded here by 1e-6.
    za, zb, extra = _clustered(64, 32, 4, sigma, seed=3)
    neg = None if negs is None else extra if negs == "shared" else torch.stack([extra.roll(i, 0) for i in range(40)], 1)
    _, s32 = weince(za, zb, neg, return_stats=True)
    _, s64 = weince(za.double(), zb.double(), None if neg is None else neg.double(), return_stats=True)
    t32, t64 = s32.tail, s64.tail
    assert float(t64.rho.max()) < ENDPOINT_SHORTFALL  # every row crowds the endpoint
    assert float(t64.rho.min()) > 1e-5
    np.testing.assert_allclose(t32.lam.numpy(), t64.lam.numpy(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(t32.beta_hat.numpy(), t64.beta_hat.numpy(), rtol=1e-9, atol=0)
    np.testing.assert_allclose(t32.delta_aic.numpy(), t64.delta_aic.numpy(), rtol=0, atol=1e-6)


def test_float32_loss_of_a_batch_mixing_crowded_and_ordinary_views_equals_float64():
    # Half the views crowd the endpoint (1 − s down to ~1e-5), half are ordinary. The crowded views' shortfalls
    # 1 − s are recomputed from float64 cosines inside the fused kernel (their rows and columns), the others stay
    # float32, so the float32 loss equals the float64 one to float32 rounding of a log-sum-exp over 2N terms
    # (measured 1.6e-7 relative) and the gradients to that rounding amplified by the normalisation (measured
    # 3.6e-5). Without the recomputation the float32 shortfalls lose ~6e-8/1e-5 of their value: measured 2.1e-4
    # on the loss and 4.0e-3 on the gradients, beyond both bounds below.
    za_c, zb_c, _ = _clustered(32, 32, 4, 0.001, seed=3)
    za_o, zb_o = _views(32, 32, seed=4)
    za, zb = torch.cat([za_c, za_o]), torch.cat([zb_c, zb_o])
    a32, b32 = za.clone().requires_grad_(), zb.clone().requires_grad_()
    a64, b64 = za.double().requires_grad_(), zb.double().requires_grad_()
    l32, s32 = weince(a32, b32, reduction="none", return_stats=True)
    l64, s64 = weince(a64, b64, reduction="none", return_stats=True)
    crowded = s64.tail.rho < ENDPOINT_SHORTFALL
    assert 0 < int(crowded.sum()) < crowded.numel() and float(s64.tail.rho.min()) < 1e-4  # a mixed batch
    torch.testing.assert_close(l32.double(), l64.detach(), rtol=1e-5, atol=0)
    g32 = torch.autograd.grad(l32.sum(), [a32, b32])
    g64 = torch.autograd.grad(l64.sum(), [a64, b64])
    for x, y in zip(g32, g64, strict=True):
        assert float((x.double() - y).norm() / y.norm()) < 4e-4


def test_tail_size_as_coded():
    assert tail_size(510, 0.1, 32) == 51  # N = 256, the paper's batch
    assert tail_size(126, 0.1, 32) == 32
    assert tail_size(20, 0.1, 32) == 20
    assert tail_size(6, 0.1, 32) == 6  # fewer than 10 negatives: all of them
    assert tail_size(1000, 0.0125, 1) == 12  # round(12.5) = 12, Python's half-to-even as in the code


def test_lambda_hand_case_cap_proximity_pivot():
    """Five anchors with ρ = 0.5..0.1 and κ_AIC = 0: λ_i = ½·σ(κ_ρ(log ρ_0 − log ρ_i)), ρ_0 = 2nd smallest."""
    rho = [0.5, 0.4, 0.3, 0.2, 0.1]
    g = torch.Generator().manual_seed(0)
    rows = [torch.cat([torch.tensor([1 - r]), (1 - r) - 0.5 * torch.rand(30, generator=g)]) for r in rho]
    neg = torch.stack(rows).double()
    neg[:, 0] = torch.tensor([1 - r for r in rho], dtype=torch.float64)
    st_ = anchor_tail_stats(neg, q=0.25, kappa_rho=10.0, kappa_aic=0.0)
    assert float(st_.rho0) == pytest.approx(0.2)
    want = [0.5 * _sigmoid(10 * (math.log(0.2) - math.log(r))) for r in rho]
    np.testing.assert_allclose(st_.lam.numpy(), want, rtol=1e-12)


def test_aic_hand_cases():
    # (a) Exact power-law tail: log F̂ = log c + β log δ, so the Weibull fit is perfect (SSE floored at 1e-12).
    k_neg, beta = 100, 3.0
    k_tail = tail_size(k_neg, 0.1, 32)  # 32
    f = np.arange(1, k_tail + 1) / (k_tail + 1.0)
    delta = (f / 0.5) ** (1 / beta)  # F(δ) = 0.5 δ^β on the tail
    s = np.concatenate([1 - delta, np.full(k_neg - k_tail, -0.9)])
    st_ = anchor_tail_stats(torch.tensor(s[None]), margin=0.0, kappa_aic=1.0, q=0.0)
    burn = max(1, k_tail // 20)
    n = k_tail - burn
    x = np.log(delta)[burn:]
    y_g = np.log(-np.log(f[burn:]))
    b_g, a_g = np.polyfit(x, y_g, 1)
    sse_g = np.sum((y_g - a_g - b_g * x) ** 2)
    want = (n * math.log(sse_g / n) + 4) - (n * math.log(1e-12 / n) + 4)
    assert st_.beta_hat.item() == pytest.approx(beta, rel=1e-9)
    assert st_.r2.item() == pytest.approx(1.0)
    assert st_.delta_aic.item() == pytest.approx(want, rel=1e-6)
    # one anchor: ρ_0 = ρ, so λ = σ(0)·σ(ΔAIC) = ½ (ΔAIC ≫ 0 here).
    assert st_.lam.item() == pytest.approx(0.5 * _sigmoid(want))
    # (b) All negatives 0 (log δ = 0 exactly): both slopes are 0, both of the wrong sign, both SSEs +1e6.
    st_ = anchor_tail_stats(torch.zeros((1, 50), dtype=torch.float64), margin=0.0)
    k_tail = tail_size(50, 0.1, 32)
    burn = max(1, k_tail // 20)
    n = k_tail - burn
    fb = (np.arange(1, k_tail + 1) / (k_tail + 1.0))[burn:]
    sse_w = np.sum((np.log(fb) - np.log(fb).mean()) ** 2) + 1e6
    sse_g = np.sum((np.log(-np.log(fb)) - np.log(-np.log(fb)).mean()) ** 2) + 1e6
    assert st_.beta_hat.item() == 0.0
    assert st_.delta_aic.item() == pytest.approx(n * math.log(sse_g / n) - n * math.log(sse_w / n), rel=1e-9)


def test_weibull_domain_tail_recovers_beta_and_favours_weibull():
    """Shortfalls δ = U^{1/β} have F(δ) = δ^β exactly: β̂ ≈ β and ΔAIC > 0 on every anchor."""
    g = torch.Generator().manual_seed(0)
    for beta in (0.8, 2.0, 5.0):
        delta = torch.rand(16, 4000, generator=g, dtype=torch.float64) ** (1 / beta)
        st_ = anchor_tail_stats(1 - delta, tail_frac=0.05)
        assert abs(float(st_.beta_hat.mean()) / beta - 1) < 0.1
        assert bool((st_.delta_aic > 0).all())


def test_global_beta_matches_naive_and_ema_rules():
    g = torch.Generator().manual_seed(1)
    delta = torch.rand(3000, generator=g, dtype=torch.float64) ** (1 / 3.0)
    beta_hat, r2 = global_tail_beta(1 - delta, tail_frac=0.05, min_tail=200)
    d = np.sort(np.maximum(delta.numpy(), 1e-6))[:200]
    f = np.arange(1, 201) / 201.0
    b, _ = np.polyfit(np.log(d)[10:], np.log(f)[10:], 1)
    assert beta_hat == pytest.approx(b, rel=1e-9) and 0.9 < r2 <= 1.0
    assert global_tail_beta(torch.rand(8)) is None  # fewer than 10 tail points
    cfg = GlobalBetaConfig()
    assert update_beta_ema(4.0, None, cfg) == 4.0
    assert update_beta_ema(4.0, (30.0, 0.5), cfg) == 4.0  # R² below 0.85: rejected
    assert update_beta_ema(4.0, (30.0, 0.9), cfg) == pytest.approx(0.9 * 4 + 0.1 * 16)  # clamped to 16
    assert update_beta_ema(4.0, (2.0, 0.9), cfg) == pytest.approx(0.9 * 4 + 0.1 * 2)


# ---------------------------------------------------------------- the Weibit law P(i) ∝ (1 − s_i)^{−β}


def _one_anchor(scores):
    """An anchor e₁ and unit candidates with cosine s to it."""
    s = torch.tensor(scores, dtype=torch.float64)
    cand = torch.stack([s, torch.sqrt(1 - s**2)], dim=1)
    return torch.tensor([[1.0, 0.0]], dtype=torch.float64), cand


def _choice_nll(scores, pick, *, weibit_beta=None, tau=None):
    """−log P(candidate `pick`) under the pure Weibit (λ = 1, β) or softmax (λ = 0, τ) model, via weince."""
    anchor, cand = _one_anchor(scores)
    others = torch.cat([cand[:pick], cand[pick + 1 :]])
    if weibit_beta is not None:
        return float(
            weince(
                anchor, cand[pick : pick + 1], others, fixed_lambda=1.0, beta_mode="global_ema", beta_ema=weibit_beta
            )
        )
    return float(weince(anchor, cand[pick : pick + 1], others, temperature=tau, fixed_lambda=0.0))


def test_weibit_law_and_softmax_bias_floor():
    """The repo's synthetic: scores {0.15, 0.45, 0.70, 0.90}, β = 0.8. λ = 1 gives exactly the Weibit
    law; its expected NLL is minimised at β = 0.8 and equals the entropy, while no softmax temperature
    reaches it (the bias floor)."""
    scores, beta = [0.15, 0.45, 0.70, 0.90], 0.8
    w = np.array([(1 - s) ** -beta for s in scores])
    p = w / w.sum()
    for i in range(4):
        assert _choice_nll(scores, i, weibit_beta=beta) == pytest.approx(-math.log(p[i]), rel=1e-12)
    entropy = -float(p @ np.log(p))

    def expected_nll(**kw):
        return sum(p[i] * _choice_nll(scores, i, **kw) for i in range(4))

    betas = [0.6, 0.7, 0.8, 0.9, 1.0]
    nll_w = [expected_nll(weibit_beta=b) for b in betas]
    assert int(np.argmin(nll_w)) == 2 and nll_w[2] == pytest.approx(entropy, rel=1e-12)
    best_softmax = min(expected_nll(tau=t) for t in np.geomspace(0.05, 5.0, 60))
    assert best_softmax - entropy > 1e-3


# ---------------------------------------------------------------- gradients


def test_no_gradient_through_lambda_or_beta():
    """Autograd's gradient equals that of the formula rebuilt with λ_i, β_i as detached constants."""
    za, zb = _views(24, 6, seed=11, dtype=torch.float64)
    za.requires_grad_()
    zb.requires_grad_()
    loss, stats = weince(za, zb, temperature=0.3, return_stats=True)
    assert not stats.tail.lam.requires_grad and not stats.beta.requires_grad
    ga, gb = torch.autograd.grad(loss, [za, zb])

    lam, beta = stats.tail.lam.clone(), stats.beta.clone()
    z = torch.nn.functional.normalize(torch.cat([za, zb]), dim=1)
    s = z @ z.T
    n2 = s.shape[0]
    logits = (1 - lam[:, None]) * s / 0.3 + (lam * beta)[:, None] * -torch.log1p(-s.clamp(-1, 1 - 1e-6))
    logits = logits.masked_fill(torch.eye(n2, dtype=torch.bool), float("-inf"))
    pos = torch.cat([torch.arange(24, 48), torch.arange(0, 24)])
    ref = (torch.logsumexp(logits, 1) - logits[torch.arange(n2), pos]).mean()
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    ra, rb = torch.autograd.grad(ref, [za, zb], retain_graph=True)
    torch.testing.assert_close(ga, ra, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gb, rb, rtol=1e-9, atol=1e-12)
    # The check can fail: letting the gradient flow through a (differentiable) λ changes it.
    lam_live = torch.sigmoid(10 * (s.masked_fill(torch.eye(n2, dtype=torch.bool), -1).max(1).values - 0.5))
    live = (1 - lam_live[:, None]) * s / 0.3 + (lam_live * beta)[:, None] * -torch.log1p(-s.clamp(-1, 1 - 1e-6))
    live = live.masked_fill(torch.eye(n2, dtype=torch.bool), float("-inf"))
    la, _ = torch.autograd.grad((torch.logsumexp(live, 1) - live[torch.arange(n2), pos]).mean(), [za, zb])
    assert not torch.allclose(la, ga)


@pytest.mark.parametrize(
    "kw",
    [
        *FIXED_STATISTICS,
        {"fixed_lambda": 0.4, "beta_mode": "one", "negatives": "shared"},
        {"fixed_lambda": 0.4, "beta_mode": "global_ema", "beta_ema": 3.0, "negatives": "per_anchor"},
    ],
)
def test_gradcheck_float64_with_fixed_statistics(kw):
    """With the stop-gradient statistics held fixed (λ fixed; β = 1 or a frozen β_t) the analytic gradient
    matches finite differences."""
    kw = dict(kw, global_beta=FROZEN_GLOBAL_BETA)
    za, zb, g = float64_views()
    mode = kw.pop("negatives", None)
    inputs = [za, zb]
    if mode == "shared":
        inputs.append(torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True))
    elif mode == "per_anchor":
        inputs.append(torch.randn(4, 5, 3, generator=g, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda *t: weince(*t, temperature=0.4, **kw), inputs)


def test_gradients_finite_at_lambda_one_and_identical_views():
    """λ = 1 (0·(−inf) on the diagonal) and s → 1 (the 1 − eps clamp) give finite losses and gradients."""
    za = torch.randn(8, 4, requires_grad=True)
    for kw in ({"fixed_lambda": 1.0}, {"fixed_lambda": 1.0, "beta_mode": "one"}, {}):
        loss = weince(za, za.detach().clone(), **kw)
        (g,) = torch.autograd.grad(loss, [za])
        assert torch.isfinite(loss) and torch.isfinite(g).all()


@pytest.mark.parametrize("kw", [{}, {"fixed_lambda": 1.0}, {"beta_mode": "one", "margin": -50.0}])
def test_fused_backward_equals_autograd_reference(kw):
    """The fused kernel's hand-written backward (fixed τ) against the streamed kernel (a tensor τ always
    streams; test_weince_stream.py checks it against the formula with autograd), including λ = 1 and views
    identical up to the 1 − eps clamp (row 0)."""
    za, zb = _views(20, 5, seed=21, dtype=torch.float64)
    zb[0] = za[0]
    grads = []
    for tau in (0.3, torch.tensor(0.3, dtype=torch.float64)):
        a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
        loss = weince(a, b, temperature=tau, reduction="sum", **kw)
        grads.append((loss, *torch.autograd.grad(loss, [a, b])))
    for x, y in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kw", [{}, {"fixed_lambda": 1.0}, {"beta_mode": "one", "margin": -50.0}])
def test_fused_kernel_paths_equal_autograd_reference(reduction, kw):
    """Gradient made in the forward (mean/sum), kept buffers (reduction="none", rows weighted unequally)
    and the no-grad forward all equal the streamed kernel (a tensor τ)."""
    za, zb = _views(20, 5, seed=31, dtype=torch.float64)
    zb[0] = za[0]
    w = torch.rand(40, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    out = []
    for tau in (0.3, torch.tensor(0.3, dtype=torch.float64)):
        a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
        loss = weince(a, b, temperature=tau, reduction=reduction, **kw)
        total = (loss * w).sum() if reduction == "none" else loss
        out.append((loss.detach(), *torch.autograd.grad(total, [a, b])))
    for x, y in zip(out[0], out[1], strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(weince(za, zb, temperature=0.3, reduction=reduction, **kw), out[0][0])


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_kernel_unclamped_branch_and_zero_row_equal_the_naive_loop(reduction):
    """The fused kernel's branch without the clamping pass (no two views within 2·eps of s = 1), its
    gradient taken through the normalisation inside the kernel, and a zero view (cosine 0 with every
    view, gradient the identity through the normalisation) against a per-anchor loop over §2's formula
    in float64, with the statistics the loss reports held as constants."""
    za, zb = _views(9, 4, seed=41, dtype=torch.float64)
    za[2] = 0.0
    a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
    loss, stats = weince(a, b, temperature=0.3, reduction=reduction, return_stats=True)
    lam, beta = stats.tail.lam, stats.beta
    assert float(lam.min()) > 0.0  # every anchor mixes in the Weibit logit

    a2, b2 = za.clone().requires_grad_(), zb.clone().requires_grad_()
    views = []
    for x in (*a2, *b2):  # normalised one at a time; the zero row stays zero
        norm = torch.linalg.vector_norm(x)
        views.append(x / norm if float(norm.detach()) > 0 else x)
    n2 = len(views)
    rows = []
    for i in range(n2):
        pos = (i + n2 // 2) % n2
        logits = {}
        for j in range(n2):
            if j != i:
                s = views[i] @ views[j]
                logits[j] = (1 - lam[i]) * s / 0.3 - lam[i] * beta[i] * torch.log1p(-s.clamp(-1.0, 1 - 1e-6))
        rows.append(torch.logsumexp(torch.stack(list(logits.values())), 0) - logits[pos])
    ref = torch.stack(rows)
    w = torch.linspace(0.5, 1.5, n2, dtype=torch.float64)
    if reduction == "mean":
        ref, w = ref.mean(), torch.ones((), dtype=torch.float64)
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad((loss * w).sum(), [a, b])
    want = torch.autograd.grad((ref * w).sum(), [a2, b2])
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("duplicate", [False, True])
def test_fused_sweeps_in_blocks_of_rows_equal_one_block(duplicate):
    """The fused kernel's element-wise sweeps, run block of rows by block of rows (a 2N = 4,096 matrix
    is 32 blocks), give the one-block results up to the order of the column sums' additions; with a
    duplicated view the clamping branch runs."""
    from contrastlab.losses.weince.kernels import _u_min, _weince_grad, _weince_rows

    za, zb = _views(7, 5, seed=6, dtype=torch.float64)
    if duplicate:
        zb[3] = za[3]  # a view and its partner coincide: s = 1 off the diagonal
    k = torch.nn.functional.normalize(torch.cat([za, zb]), dim=1)
    cos = k @ k.T
    pos = (torch.arange(14) + 7) % 14
    g = torch.Generator().manual_seed(6)
    a, b = torch.rand(2, 14, 1, generator=g, dtype=torch.float64).unbind(0)
    s_max = (cos - 3.0 * torch.eye(14, dtype=torch.float64)).amax(dim=1, keepdim=True)
    w = torch.rand(14, generator=g, dtype=torch.float64)
    u_min = _u_min(1e-6, torch.float64)
    out = []
    for rows in (14, 1, 4):
        e, col_sum, loss = _weince_rows(1.0 - cos, pos, a, b, s_max, u_min, rows=rows)
        u = 1.0 - cos
        _weince_rows(u, pos, a, b, s_max, u_min, rows=rows)  # u as the sweep leaves it
        grads = [
            _weince_grad(k, e.clone(), col_sum, u.clone(), pos, a, b, gr, inplace=ip, rows=rows)
            for gr, ip in ((None, True), (w, False))
        ]
        out.append((loss, col_sum, *grads))
    assert torch.isfinite(out[0][0]).all()
    for other in out[1:]:
        for x, y in zip(other, out[0], strict=True):
            torch.testing.assert_close(x, y, rtol=1e-13, atol=1e-15)


def test_fused_kernel_forms_the_gradient_ahead_only_for_a_mean_or_sum(monkeypatch):
    """A mean or a sum sends every row the same gradient, so the fused forward forms it ahead;
    reduction="none" keeps the buffers instead (its rows may be weighted unequally)."""
    from contrastlab.losses.weince.kernels import _WeinceSimCLR

    seen = []
    forward = _WeinceSimCLR.forward

    def spy(ctx, *args):
        seen.append(args[7])  # grad_ahead
        return forward(ctx, *args)

    monkeypatch.setattr(_WeinceSimCLR, "forward", staticmethod(spy))
    za, zb = _views(8, 4, seed=12)
    for reduction in ("mean", "sum", "none"):
        weince(za.clone().requires_grad_(), zb, reduction=reduction)
    assert seen == [True, True, False]


def test_gradient_made_ahead_recomputes_for_unequal_rows():
    """The fused function with grad_ahead=True still gives the exact gradient when rows are weighted."""
    from contrastlab.losses.weince.kernels import _WeinceSimCLR

    g = torch.Generator().manual_seed(4)
    k = torch.nn.functional.normalize(torch.randn(12, 4, generator=g, dtype=torch.float64), dim=1)
    cos = k @ k.T
    pos = torch.cat([torch.arange(6, 12), torch.arange(6)])
    a = torch.rand(12, 1, generator=g, dtype=torch.float64) * 2
    b = torch.rand(12, 1, generator=g, dtype=torch.float64) * 3
    s_max = cos.masked_fill(torch.eye(12, dtype=torch.bool), -2.0).amax(dim=1, keepdim=True)
    w = torch.rand(12, generator=g, dtype=torch.float64)
    grads = []
    for ahead in (True, False):
        kk = k.clone().requires_grad_()
        loss = _WeinceSimCLR.apply(kk, 1.0 - cos, pos, a, b, s_max, 1e-6, ahead, None)  # u = 1 − s, overwritten
        grads.append(torch.autograd.grad((loss * w).sum(), kk)[0])
        if ahead:  # and twice in a row with retain_graph: the saved gradient is never modified in place
            kk2 = k.clone().requires_grad_()
            l2 = _WeinceSimCLR.apply(kk2, 1.0 - cos, pos, a, b, s_max, 1e-6, True, None).mean()
            g1 = torch.autograd.grad(l2, kk2, retain_graph=True)[0]
            torch.testing.assert_close(torch.autograd.grad(l2, kk2)[0], g1, rtol=0, atol=0)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", [(7, 30), (1, 500), (40, 12)])
def test_top_values_equals_topk(shape):
    """Both numpy selections (whole-row sort for many rows, partition for one) equal torch.topk."""
    from contrastlab.losses.weince.tail import _top_values

    g = torch.Generator().manual_seed(5)
    x = torch.randn(*shape, generator=g)
    k = max(1, shape[1] // 5)
    torch.testing.assert_close(_top_values(x, k), torch.topk(x, k, dim=1).values, rtol=0, atol=0)
    cols = torch.randint(0, shape[1], (shape[0],), generator=g)
    masked = x.clone()
    masked[torch.arange(shape[0]), cols] = float("-inf")
    got = _top_values(x, k, exclude=(cols,))
    torch.testing.assert_close(got, torch.topk(masked, k, dim=1).values, rtol=0, atol=0)
    y = x.clone()
    got = _top_values(y, k, exclude=(cols,), inplace=True)  # the caller's tensor is the working copy
    torch.testing.assert_close(got, torch.topk(masked, k, dim=1).values, rtol=0, atol=0)
    assert not torch.equal(y, x) or shape[0] == 1 and k == shape[1]


def test_top_values_of_long_rows_equal_topk():
    """Rows at least _PARTITION_MIN_COLS long are partitioned, then their k largest sorted: the same
    values as torch.topk, with excluded columns left out."""
    from contrastlab.losses.weince.tail import _PARTITION_MIN_COLS, _top_values

    g = torch.Generator().manual_seed(9)
    x = torch.randn(5, _PARTITION_MIN_COLS + 3, generator=g)
    cols = torch.randint(0, x.shape[1], (5,), generator=g)
    masked = x.clone()
    masked[torch.arange(5), cols] = float("-inf")
    for k in (1, 37, x.shape[1] - 1):
        want = torch.topk(masked, k, dim=1).values
        torch.testing.assert_close(_top_values(x, k, exclude=(cols,)), want, rtol=0, atol=0)


def test_learnable_temperature_gets_the_softmax_part_only():
    """∂L/∂τ through the Weibit term is 0 (it does not depend on τ): with λ = 1 the τ-gradient vanishes."""
    za, zb = _views(10, 4, seed=22, dtype=torch.float64)
    tau = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    (g1,) = torch.autograd.grad(weince(za, zb, temperature=tau, fixed_lambda=1.0, beta_mode="one"), [tau])
    assert abs(float(g1)) < 1e-12
    (g0,) = torch.autograd.grad(weince(za, zb, temperature=tau, fixed_lambda=0.0), [tau])
    (gn,) = torch.autograd.grad(nt_xent(za, zb, temperature=tau), [tau])
    torch.testing.assert_close(g0, gn)


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
magnitudes = st.one_of(st.just(0.0), st.floats(1e-6, 1e6), st.floats(-1e6, -1e-6))


@SETTINGS
@given(data=st.data(), tau=st.floats(1e-3, 1e3), mode=st.sampled_from(["per_anchor", "one", "global_ema"]))
def test_valid_inputs_give_finite_loss_and_grads(data, tau, mode):
    n = data.draw(st.integers(2, 6))
    d = data.draw(st.integers(1, 4))
    vals = data.draw(st.lists(magnitudes, min_size=2 * n * d, max_size=2 * n * d))
    z = torch.tensor(vals, dtype=torch.float32).reshape(2, n, d)
    za = z[0].clone().requires_grad_()
    loss = weince(za, z[1], temperature=tau, beta_mode=mode, aux_top_m=data.draw(st.integers(0, 3)))
    (g,) = torch.autograd.grad(loss, [za])
    assert torch.isfinite(loss) and torch.isfinite(g).all()


# ---------------------------------------------------------------- invariances, precision, state


def test_permuting_pairs_and_swapping_views():
    za, zb = _views(30, 8, seed=12, dtype=torch.float64)
    per_row = weince(za, zb, reduction="none")
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    permuted = weince(za[perm], zb[perm], reduction="none")
    torch.testing.assert_close(permuted, per_row[torch.cat([perm, perm + 30])])
    swapped = weince(zb, za, reduction="none")
    torch.testing.assert_close(swapped, torch.cat([per_row[30:], per_row[:30]]))
    torch.testing.assert_close(weince(3.0 * za, 0.5 * zb), weince(za, zb))  # cosine: scale-invariant


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_inputs_are_computed_in_float32(half):
    za, zb = _views(16, 8, seed=13)
    za, zb = za.to(half), zb.to(half)
    got = weince(za, zb)
    assert got.dtype == torch.float32
    assert torch.equal(got, weince(za.float(), zb.float()))


def test_autocast_does_not_lower_precision():
    za, zb = _views(32, 8, seed=14)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = weince(za, zb)
    assert torch.equal(got, weince(za, zb))


def test_global_ema_state_is_explicit_and_module_buffer_matches():
    za, zb = _views(300, 3, seed=15)  # 2N = 600 views: the global tail has 17,940 points (≥ 1024)
    _, s1 = weince(za, zb, beta_mode="global_ema", return_stats=True)
    assert s1.beta_global_hat is not None
    _, s2 = weince(zb, za, beta_mode="global_ema", beta_ema=s1.beta_ema, return_stats=True)
    assert float(s1.beta_ema) != 4.0  # the batch's estimate was accepted and moved the EMA
    mod = WEINCELoss(beta_mode="global_ema")
    assert "beta_ema" in mod.state_dict()
    mod(za, zb)
    assert float(mod.beta_ema) == float(s1.beta_ema)
    mod.eval()
    mod(zb, za)
    assert float(mod.beta_ema) == float(s1.beta_ema)  # evaluation leaves the state alone
    mod.train()
    mod(zb, za)
    assert float(mod.beta_ema) == float(s2.beta_ema)
    assert mod.last_stats is not None and mod.last_stats.tail.lam.shape == (600,)


def test_module_matches_function_and_aux_terms_add():
    za, zb = _views(40, 8, seed=16)
    mod = WEINCELoss(temperature=0.2, margin=0.0, aux_top_m=10)
    want = weince(za, zb, temperature=0.2, margin=0.0, aux_top_m=10)
    assert torch.equal(mod(za, zb), want)
    base = weince(za, zb, temperature=0.2, margin=0.0)
    assert float(want) > float(base)  # two non-negative cross-entropies added with weight 0.5
    assert "beta_mode='per_anchor'" in repr(mod)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"z_a": [[1.0]]}, "z_a"),
        ({"z_b": torch.randn(4, 5)}, "z_b"),
        ({"z_a": torch.randn(1, 3), "z_b": torch.randn(1, 3)}, "z_a"),
        ({"z_a": torch.full((4, 3), float("nan"))}, "z_a"),
        ({"negatives": torch.randn(4, 2)}, "negatives"),
        ({"negatives": torch.randn(5, 2, 3)}, "negatives"),
        ({"negatives": "x"}, "negatives"),
        ({"beta_mode": "beta"}, "beta_mode"),
        ({"q": 1.5}, "q"),
        ({"tail_frac": 0.0}, "tail_frac"),
        ({"min_tail": 0}, "min_tail"),
        ({"min_tail": 3.0}, "min_tail"),
        ({"kappa_rho": -1.0}, "kappa_rho"),
        ({"kappa_aic": float("inf")}, "kappa_aic"),
        ({"margin": float("nan")}, "margin"),
        ({"eps": 1.0}, "eps"),
        ({"fixed_lambda": 1.5}, "fixed_lambda"),
        ({"aux_top_m": -1}, "aux_top_m"),
        ({"aux_weight": -0.5}, "aux_weight"),
        ({"beta_ema": -1.0}, "beta_ema"),
        ({"beta_ema": torch.ones(2)}, "beta_ema"),
        ({"global_beta": {}}, "global_beta"),
        ({"temperature": 0.0}, "temperature"),
        ({"reduction": "max"}, "reduction"),
        ({"return_stats": 1}, "return_stats"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, name):
    args = {"z_a": torch.randn(4, 3), "z_b": torch.randn(4, 3)}
    args.update(kwargs)
    za, zb = args.pop("z_a"), args.pop("z_b")
    with pytest.raises((ValueError, TypeError), match=f"^{name}"):
        weince(za, zb, **args)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"beta_mode": "x"}, "beta_mode"),
        ({"q": -0.1}, "q"),
        ({"fixed_lambda": -1.0}, "fixed_lambda"),
        ({"global_beta": None}, "global_beta"),
        ({"temperature": -1.0}, "temperature"),
    ],
)
def test_module_validates_at_construction(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=f"^{name}"):
        WEINCELoss(**kwargs)


@pytest.mark.parametrize(
    "field,value",
    [("tail_frac", 2.0), ("min_tail", 0), ("r2_min", 1.5), ("beta_max", 0.1), ("momentum", 1.0), ("init", 0.0)],
)
def test_global_beta_config_validates(field, value):
    with pytest.raises((ValueError, TypeError), match=f"^{field}"):
        GlobalBetaConfig(**{field: value})


def test_anchor_tail_stats_validates():
    with pytest.raises(TypeError, match="^neg_sims"):
        anchor_tail_stats([[0.1]])
    with pytest.raises(ValueError, match="^neg_sims"):
        anchor_tail_stats(torch.tensor([[float("nan"), 0.1]]))
    with pytest.raises(ValueError, match="^neg_sims"):
        anchor_tail_stats(torch.full((2, 3), float("-inf")))
