"""The Matryoshka wrapper: sentence-transformers' ``MatryoshkaLoss`` as the oracle, every registry entry wrapped.

Float64 throughout. Equalities with a loop over the widths are by construction (the wrapper calls the inner
loss on the same slices), so they are exact; equalities with a computation that renormalises differently
(sentence-transformers' ``shrink``, an explicit ``F.normalize``) differ only by rounding, bounded below.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from contrastlab.losses import (
    LOSSES,
    InfoNCELoss,
    LearnableTemperature,
    MatryoshkaLoss,
    WEINCELoss,
    info_nce,
    matryoshka,
    supcon,
    weince,
)
from tests.losses.test_registry import D, _call, _inputs
from tests.peers import matryoshka_mnrl_loss

EPS = torch.finfo(torch.float64).eps


def _views(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    return a, a + 0.8 * torch.randn(n, d, generator=g, dtype=torch.float64)


# ----------------------------------------------------------------- sentence-transformers' MatryoshkaLoss


@pytest.mark.parametrize(
    ("dims", "weights"),
    [((8, 16, 32, 64), None), ((4, 64), (0.5, 2.0)), ((12, 24, 48), (1.0, 0.0, 3.0)), ((64,), None)],
)
@pytest.mark.parametrize("scale", [20.0, 50.0])
def test_equals_sentence_transformers_matryoshka_mnrl_in_value_and_gradient(dims, weights, scale) -> None:
    n, d = 10, 64
    a, p = (x.requires_grad_() for x in _views(n, d, seed=len(dims)))
    ref = matryoshka_mnrl_loss([a, p], dims, weights, scale=scale)
    got = matryoshka(partial(info_nce, temperature=1.0 / scale), a, p, dims=dims, weights=weights)
    assert got.dtype == torch.float64
    # Per width, each side's logit s·cos is a d-term dot product of rows normalised once (ours) or twice
    # (sentence-transformers normalises the prefix in `shrink`, MNRL again in cos_sim): within s·(d + 6)·eps
    # of the exact value; a log-sum-exp over n logits adds n·eps/2 per side. Weighted sum over the widths.
    ws = weights or (1.0,) * len(dims)
    tol = sum(w * 2 * (scale * (k + 6) + n) * EPS for k, w in zip(dims, ws, strict=True))
    assert abs(float((got - ref).detach())) <= tol
    g_got = torch.autograd.grad(got, (a, p))
    g_ref = torch.autograd.grad(ref, (a, p))
    for x, y in zip(g_got, g_ref, strict=True):  # a softmax (entries ≤ 1) times s over each row's prefix norm
        assert float((x - y).abs().max()) <= scale * tol


# ----------------------------------------------------------------- the wrapper itself


def test_is_the_weighted_sum_over_the_widths_by_construction() -> None:
    a, p = _views(9, 16, seed=1)
    negs = torch.randn(9, 3, 16, dtype=torch.float64)
    dims, weights = (2, 5, 16), (0.25, 1.0, 3.0)
    for args, fn in (((a, p), partial(info_nce, temperature=0.2)), ((a, p, negs), partial(info_nce, variant="dcl"))):
        want = sum(w * fn(*(x[..., :d] for x in args)) for d, w in zip(dims, weights, strict=True))
        assert torch.equal(matryoshka(fn, *args, dims=dims, weights=weights), want)


def test_keeps_integer_arguments_and_per_row_reduction() -> None:
    z, _ = _views(12, 8, seed=2)
    y = torch.arange(12) % 3
    got = matryoshka(partial(supcon, reduction="none"), z, y, dims=(3, 8))
    assert got.shape == (12,)
    assert torch.equal(got, supcon(z[:, :3], y, reduction="none") + supcon(z, y, reduction="none"))


def test_masked_and_weighted_info_nce_pass_their_keywords_through() -> None:
    a, p = _views(8, 10, seed=3)
    mask = torch.zeros(8, 8, dtype=torch.bool)
    mask[0, 1] = mask[5, 2] = True
    cand_w = torch.rand(8, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.1
    fn = partial(info_nce, temperature=0.3, positive_mask=mask, weights=cand_w)
    want = fn(a[:, :4], p[:, :4]) + fn(a, p)
    assert torch.equal(matryoshka(fn, a, p, dims=(4, 10)), want)
    module = MatryoshkaLoss(partial(info_nce, temperature=0.3), dims=(4, 10))
    assert torch.equal(module(a, p, positive_mask=mask, weights=cand_w), want)


def test_module_trains_the_inner_loss_parameters() -> None:
    tau = LearnableTemperature(0.1)
    module = MatryoshkaLoss(InfoNCELoss(temperature=tau), dims=(4, 8), weights=(1.0, 2.0))
    assert list(module.parameters()) == list(tau.parameters())
    a, p = _views(6, 8, seed=5)
    module(a, p).backward()
    assert all(q.grad is not None and bool(torch.isfinite(q.grad).all()) for q in tau.parameters())
    assert "dims=[4, 8], weights=[1.0, 2.0]" in repr(module)


def test_prefixes_beyond_the_last_width_get_no_gradient() -> None:
    a, p = (x.requires_grad_() for x in _views(6, 12, seed=6))
    matryoshka(info_nce, a, p, dims=(3, 7)).backward()
    assert a.grad is not None and float(a.grad[:, 7:].abs().max()) == 0.0
    assert float(a.grad[:, :7].abs().min(dim=0).values.min()) > 0


# ----------------------------------------------------------------- every loss of the registry, wrapped

NAMES = sorted(LOSSES)
DIMS, WEIGHTS = (2, 4, D), (1.0, 0.5, 2.0)


def _wrapped(name: str, t: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    """The registry loss ``name`` wrapped: every tensor of ``t`` positional, floating ones truncated."""
    keys = [k for k in t if k != "teacher"]  # the teacher's scores go by keyword, whole
    fixed = {k: v for k, v in t.items() if k == "teacher"}
    return matryoshka(
        lambda *xs: _call(name, {**dict(zip(keys, xs, strict=True)), **fixed}, **kw),
        *(t[k] for k in keys),
        dims=DIMS,
        weights=WEIGHTS,
    )


@pytest.mark.parametrize("name", NAMES)
def test_every_registry_loss_wrapped_is_finite_with_gradients(name) -> None:
    t = {k: v.requires_grad_() if v.is_floating_point() else v for k, v in _inputs(name, seed=0).items()}
    loss = _wrapped(name, t)
    assert loss.ndim == 0 and loss.dtype == torch.float64 and bool(torch.isfinite(loss))
    loss.backward()
    for k in ("a", "b"):
        g = t[k].grad
        assert g is not None and bool(torch.isfinite(g).all()), k
        assert bool((g.abs().amax(dim=0) > 0).all()), k  # every coordinate is in some prefix


@pytest.mark.parametrize("name", NAMES)
def test_every_registry_loss_sees_each_prefix_renormalised(name) -> None:
    """Each prefix is the loss's own input: renormalising it first changes nothing (the loss normalises)."""
    t = _inputs(name, seed=1)
    want = sum(
        w
        * _call(
            name,
            {
                k: F.normalize(v[..., :d], dim=-1) if v.is_floating_point() and k != "teacher" else v
                for k, v in t.items()
            },
        )
        for d, w in zip(DIMS, WEIGHTS, strict=True)
    )
    torch.testing.assert_close(_wrapped(name, t), want, rtol=1e-10, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_every_registry_loss_wrapped_keeps_its_per_row_shape(name) -> None:
    t = _inputs(name, seed=2)
    per_row, plain = _wrapped(name, t, reduction="none"), _call(name, t, reduction="none")
    assert per_row.shape == plain.shape and bool(torch.isfinite(per_row).all())


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"dims": (2, 9)}, ValueError, r"^dims: width 9 is larger than the embedding width D = 8"),
        ({"dims": (4, 4)}, ValueError, r"^dims must be strictly increasing"),
        ({"dims": (6, 3)}, ValueError, r"^dims must be strictly increasing"),
        ({"dims": (0, 3)}, ValueError, r"^dims must be >= 1"),
        ({"dims": ()}, ValueError, r"^dims must hold at least one width"),
        ({"dims": 8}, TypeError, r"^dims must be a sequence"),
        ({"dims": (2.0, 8)}, TypeError, r"^dims must be ints"),
        ({"dims": (2, 8), "weights": (1.0,)}, ValueError, r"^weights must hold one weight per width \(2\), got 1"),
        ({"dims": (2, 8), "weights": (1.0, -0.5)}, ValueError, r"^weights must be finite and >= 0"),
        ({"dims": (2, 8), "weights": (1.0, float("nan"))}, ValueError, r"^weights must be finite and >= 0"),
        ({"dims": (2, 8), "weights": (0, 0.0)}, ValueError, r"^weights must not all be 0"),
        ({"dims": (2, 8), "weights": "11"}, TypeError, r"^weights must be None or a sequence"),
    ],
)
def test_bad_widths_and_weights_are_named(kw, error, match) -> None:
    a, p = _views(4, 8, seed=7)
    with pytest.raises(error, match=match):
        matryoshka(info_nce, a, p, **kw)
    if "embedding width" not in match:  # the module checks what it can before seeing D
        with pytest.raises(error, match=match):
            MatryoshkaLoss(info_nce, **kw)


def test_bad_embeddings_and_inner_losses_are_named() -> None:
    a, p = _views(4, 8, seed=8)
    with pytest.raises(ValueError, match=r"^embeddings: argument 1 has width 6 but argument 0 has 8"):
        matryoshka(info_nce, a, p[:, :6], dims=(2, 6))
    with pytest.raises(ValueError, match=r"^embeddings: .* no floating-point"):
        matryoshka(info_nce, torch.arange(4), dims=(2,))
    with pytest.raises(TypeError, match=r"^loss must return a tensor, got tuple"):
        matryoshka(partial(weince, return_stats=True, min_tail=2), a, p, dims=(4, 8))
    with pytest.raises(TypeError, match=r"^loss must be callable"):
        matryoshka("info_nce", a, p, dims=(4,))
    with pytest.raises(ValueError, match=r"^loss: a WEINCELoss with a global beta_t state"):
        MatryoshkaLoss(WEINCELoss(beta_mode="global_ema"), dims=(4, 8))
    with pytest.raises(ValueError, match=r"^anchor contains NaN"):  # the inner loss's own checks still apply
        matryoshka(info_nce, a.clone().fill_(float("nan")), p, dims=(4, 8))
