"""The tiled kernel equals the dense path; custom backwards pass gradcheck; the budget picks the path."""

from __future__ import annotations

import pytest
import torch

from contrastlab.losses import LearnableTemperature, info_nce, nt_xent, tiled
from contrastlab.losses.tiled import (
    _DenseRowLSE,
    _TiledLSE,
    _TiledPerAnchorLSE,
    plan_chunk_size,
)
from tests.losses.reference import info_nce_loop, nt_xent_loop, to64

# (negatives kind, variant, symmetric); "ntxent" is nt_xent's 2N-view case.
MODES = [
    ("inbatch", "infonce", False),
    ("inbatch", "dcl", False),
    ("inbatch", "infonce", True),
    ("inbatch", "dcl", True),
    ("shared", "infonce", False),
    ("shared", "dcl", False),
    ("per_anchor", "infonce", False),
    ("per_anchor", "dcl", False),
    ("ntxent", None, False),
]


def _data(kind: str, n: int, d: int, k: int, *, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=dtype)
    p = a + 0.7 * torch.randn(n, d, generator=g, dtype=dtype)
    negs = None
    if kind == "shared":
        negs = torch.randn(k, d, generator=g, dtype=dtype)
    elif kind == "per_anchor":
        negs = torch.randn(n, k, d, generator=g, dtype=dtype)
    return a, p, negs


def _loss_and_grads(kind, variant, symmetric, a, p, negs, tau, chunk_size, reduction="mean", upstream=None):
    """Loss value and gradients w.r.t. every input and the (learnable) temperature."""
    a = a.detach().clone().requires_grad_()
    p = p.detach().clone().requires_grad_()
    leaves = [a, p]
    if negs is not None:
        negs = negs.detach().clone().requires_grad_()
        leaves.append(negs)
    temp = LearnableTemperature(tau).to(a.dtype if a.dtype == torch.float64 else torch.float32)
    if kind == "ntxent":
        out = nt_xent(a, p, temperature=temp, reduction=reduction, chunk_size=chunk_size)
    else:
        out = info_nce(
            a,
            p,
            negs,
            temperature=temp,
            variant=variant,
            symmetric=symmetric,
            reduction=reduction,
            chunk_size=chunk_size,
        )
    (out if upstream is None else (out * upstream).sum()).backward()
    grads = [x.grad for x in leaves] + [temp.log_scale.grad]
    return out.detach(), grads


def _assert_same(x, y, rtol=1e-5, atol=1e-6):
    for u, v in zip(x, y, strict=True):
        torch.testing.assert_close(u, v, rtol=rtol, atol=atol)


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
@pytest.mark.parametrize(("n", "chunk"), [(12, 4), (12, 5), (11, 1), (9, 64), (13, 3)])
def test_tiled_equals_dense(kind, variant, symmetric, n, chunk):
    a, p, negs = _data(kind, n, 6, 7)
    dense = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.2, None)
    tiled_ = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.2, chunk)
    _assert_same([dense[0]], [tiled_[0]])
    _assert_same(dense[1], tiled_[1])


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
def test_tiled_per_sample_losses_with_arbitrary_upstream_gradient(kind, variant, symmetric):
    a, p, negs = _data(kind, 10, 5, 6, seed=1)
    rows = 2 * 10 if kind == "ntxent" else 10
    upstream = torch.randn(rows, generator=torch.Generator().manual_seed(3))
    dense = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.3, None, "none", upstream)
    tiled_ = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.3, 3, "none", upstream)
    _assert_same([dense[0]], [tiled_[0]])
    _assert_same(dense[1], tiled_[1])


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
def test_tiled_matches_naive_loop(kind, variant, symmetric):
    a, p, negs = _data(kind, 5, 4, 3, dtype=torch.float64, seed=2)
    if kind == "ntxent":
        out = nt_xent(a, p, temperature=0.4, reduction="none", chunk_size=2)
        ref = nt_xent_loop(*to64(a, p), 0.4)
    else:
        out = info_nce(
            a, p, negs, temperature=0.4, variant=variant, symmetric=symmetric, reduction="none", chunk_size=2
        )
        ref = info_nce_loop(*to64(a, p), negs, 0.4, variant, symmetric, True)
    torch.testing.assert_close(out, torch.tensor(ref, dtype=torch.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("kind", "variant", "symmetric"), [m for m in MODES if not (m[0] == "inbatch" and m[1] == "dcl")]
)
def test_single_anchor(kind, variant, symmetric):
    a, p, negs = _data(kind, 1, 4, 3, seed=4)
    dense = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.5, None)
    tiled_ = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.5, 2)
    _assert_same([dense[0]], [tiled_[0]])
    _assert_same(dense[1], tiled_[1])


@pytest.mark.parametrize("kind", ["shared", "per_anchor"])
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
def test_single_negative(kind, variant):
    a, p, negs = _data(kind, 6, 4, 1, seed=5)
    dense = _loss_and_grads(kind, variant, False, a, p, negs, 0.5, None)
    tiled_ = _loss_and_grads(kind, variant, False, a, p, negs, 0.5, 4)
    _assert_same([dense[0]], [tiled_[0]])
    _assert_same(dense[1], tiled_[1])


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
def test_cold_temperature_with_aligned_vectors_does_not_overflow(kind, variant, symmetric):
    # τ = 0.01 and anchors equal to their positives: logits up to 100, exp(100) overflows float32.
    a, _, negs = _data(kind, 8, 4, 5, seed=6)
    p = a.clone()
    if negs is not None:
        negs = negs + 0.0
        negs[..., :] = a[0] if negs.ndim == 2 else a.unsqueeze(1)  # every negative aligned too
        negs = negs + 1e-3 * torch.randn(negs.shape, generator=torch.Generator().manual_seed(7))
    dense = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.01, None)
    tiled_ = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.01, 3)
    for x in [dense[0], tiled_[0], *dense[1], *tiled_[1]]:
        assert torch.isfinite(x).all()
    # Logits of magnitude 100 carry float32 rounding of ~1e-5 absolute; compare at that scale.
    _assert_same([dense[0]], [tiled_[0]], rtol=1e-5, atol=1e-4)
    _assert_same(dense[1], tiled_[1], rtol=1e-4, atol=1e-3)
    if kind == "inbatch" and variant == "infonce":
        assert float(tiled_[0]) >= 0.0  # the positive is in the denominator: exactly >= 0


@pytest.mark.parametrize("chunk", [None, 2])
def test_overshooting_shift_falls_back_to_exact_sweep(monkeypatch, chunk):
    # DCL at τ = 0.005 with positives aligned and negatives orthogonal: the Cauchy–Schwarz shift
    # (200 − 60) overshoots the row maxima (≈ 0) so far that exp underflows; the exact sweep must run.
    d = 8
    a = torch.eye(d)[:4] * 3.0
    p = a.clone()
    calls = []
    real = tiled._online_rows
    monkeypatch.setattr(tiled, "_online_rows", lambda *args: calls.append(1) or real(*args))
    out = info_nce(a, p, temperature=0.005, variant="dcl", chunk_size=chunk)
    assert calls, "the fallback sweep was not used"
    ref = info_nce_loop(*to64(a, p), None, 0.005, "dcl", False, True)
    torch.testing.assert_close(out.double(), torch.tensor(ref, dtype=torch.float64).mean(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("kind", "variant", "symmetric"), [MODES[0], MODES[2], MODES[4], MODES[6], MODES[8]])
def test_half_precision_inputs_computed_in_fp32(dtype, kind, variant, symmetric):
    a, p, negs = _data(kind, 9, 8, 5, seed=8)
    a, p = a.to(dtype), p.to(dtype)
    negs = None if negs is None else negs.to(dtype)
    out_t, g_t = _loss_and_grads(kind, variant, symmetric, a, p, negs, 0.1, 4)
    up = (a.float(), p.float(), None if negs is None else negs.float())
    out_d, g_d = _loss_and_grads(kind, variant, symmetric, *up, 0.1, None)
    assert out_t.dtype == torch.float32
    assert g_t[0].dtype == dtype
    torch.testing.assert_close(out_t, out_d, rtol=1e-5, atol=1e-6)
    for gt, gd in zip(g_t[:-1], g_d[:-1], strict=True):  # input grads are rounded to the input's dtype
        torch.testing.assert_close(gt, gd.to(dtype))
    # dL/dlog(1/τ) is a sum of cancelling terms of size |logit| ≈ 10 here: compare at 1e-5 absolute.
    torch.testing.assert_close(g_t[-1], g_d[-1], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------
# float64 gradcheck of every custom backward
# ---------------------------------------------------------------------------------------------------


def _qk(n, m, d, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, d, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(m, d, generator=g, dtype=torch.float64, requires_grad=True)
    return q, k


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("columns", [False, True])
@pytest.mark.parametrize("block", [2, 3])
def test_gradcheck_tiled(exclude, columns, block):
    q, k = _qk(5, 5, 3, 10)

    def f(q, k):
        row, col = _TiledLSE.apply(q, k, block, exclude, columns, None)
        return (row, col) if columns else row

    assert torch.autograd.gradcheck(f, (q, k))


def test_gradcheck_tiled_shared_candidates_rectangular():
    q, k = _qk(4, 7, 3, 11)
    assert torch.autograd.gradcheck(lambda q, k: _TiledLSE.apply(q, k, 3, False, False, None)[0], (q, k))


@pytest.mark.parametrize("exclude", [False, True])
def test_gradcheck_dense(exclude):
    q, k = _qk(5, 5, 3, 12)
    assert torch.autograd.gradcheck(lambda q, k: _DenseRowLSE.apply(q, k, exclude, None), (q, k))


def test_gradcheck_tiled_per_anchor():
    g = torch.Generator().manual_seed(13)
    q = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    negs = torch.randn(4, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, n: _TiledPerAnchorLSE.apply(q, n, 2), (q, negs))


def test_normalize_scale_matches_autograd_and_gradchecks():
    g = torch.Generator().manual_seed(16)
    x = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    s = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tiled.normalize_scale, (x, s))
    x = x.detach().clone()
    x[2] = 0.0  # not differentiable there: the convention is zero stays zero with gradient s·g (l2_normalize's)
    x.requires_grad_()
    from contrastlab.losses._common import l2_normalize

    up = torch.randn(5, 4, generator=g, dtype=torch.float64)
    ours = torch.autograd.grad((tiled.normalize_scale(x, s) * up).sum(), (x, s))
    ref = torch.autograd.grad((l2_normalize(x) * s * up).sum(), (x, s))
    for u, v in zip(ours, ref, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours[0][2], 3.0 * up[2])


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
def test_gradcheck_through_loss_with_learnable_temperature(kind, variant, symmetric):
    a, p, negs = _data(kind, 4, 3, 3, dtype=torch.float64, seed=14)
    temp = LearnableTemperature(0.5).double()
    inputs = [a.requires_grad_(), p.requires_grad_(), temp.log_scale]

    def f(a, p, _log_scale):
        if kind == "ntxent":
            return nt_xent(a, p, temperature=temp, reduction="none", chunk_size=3)
        return info_nce(
            a, p, negs, temperature=temp, variant=variant, symmetric=symmetric, reduction="none", chunk_size=3
        )

    assert torch.autograd.gradcheck(f, inputs)


# ---------------------------------------------------------------------------------------------------
# The memory budget chooses the path
# ---------------------------------------------------------------------------------------------------


def test_plan_chunk_size_budget_logic():
    # 64 × 64 float32 logits + gradient = 32 KiB.
    assert plan_chunk_size(64, 64, 4, None, memory_budget_bytes=32 * 1024) is None
    assert plan_chunk_size(64, 64, 4, None, memory_budget_bytes=32 * 1024 - 1) == tiled.DEFAULT_CHUNK_SIZE
    assert plan_chunk_size(64, 64, 4, 7, memory_budget_bytes=1 << 40) == 7  # an int always forces tiling
    # The default budget: N = 8192 in-batch float32 stays dense, N = 16384 is tiled.
    assert plan_chunk_size(8192, 8192, 4, None) is None
    assert plan_chunk_size(16384, 16384, 4, None) == tiled.DEFAULT_CHUNK_SIZE


@pytest.mark.parametrize(("bad", "exc"), [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError)])
def test_chunk_size_validated(bad, exc):
    a = torch.randn(4, 3)
    with pytest.raises(exc, match="^chunk_size"):
        info_nce(a, a, chunk_size=bad)
    with pytest.raises(exc, match="^chunk_size"):
        nt_xent(a, a, chunk_size=bad)
    from contrastlab.losses import InfoNCELoss, NTXentLoss

    with pytest.raises(exc, match="^chunk_size"):
        InfoNCELoss(chunk_size=bad)
    with pytest.raises(exc, match="^chunk_size"):
        NTXentLoss(chunk_size=bad)


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
def test_small_budget_routes_to_tiled_kernel(monkeypatch, kind, variant, symmetric):
    # With a 16 KiB budget the 48 × 48 (or 96 × 96) float32 logits and their gradient (18 KiB+) do not
    # fit: chunk_size=None must take the tiled kernel; with the real budget it must stay dense.
    a, p, negs = _data(kind, 48, 4, 48, seed=15)
    used = []
    for name in ("tiled_lse", "tiled_lse_rows_cols", "tiled_per_anchor_lse", "dense_row_lse"):
        real = getattr(tiled, name)
        monkeypatch.setattr(tiled, name, lambda *args, _r=real, _n=name, **kw: used.append(_n) or _r(*args, **kw))

    def run():
        used.clear()
        if kind == "ntxent":
            return nt_xent(a, p, temperature=0.3)
        return info_nce(a, p, negs, temperature=0.3, variant=variant, symmetric=symmetric)

    dense_out = run()
    assert not any(u.startswith("tiled") for u in used)
    monkeypatch.setattr(tiled, "DENSE_MEMORY_BUDGET_BYTES", 16 * 1024)
    tiled_out = run()
    assert used and all(u.startswith("tiled") for u in used)
    torch.testing.assert_close(tiled_out, dense_out, rtol=1e-5, atol=1e-6)
