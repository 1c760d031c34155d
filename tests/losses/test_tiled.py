"""The tiled kernel equals the dense path; custom backwards pass gradcheck; the budget picks the path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contrastlab.losses import LearnableTemperature, info_nce, nt_xent, tiled
from contrastlab.losses.tiled import (
    _DenseRowLSE,
    _TiledLSE,
    _TiledPerAnchorLSE,
    plan_chunk_size,
)
from tests.losses._inputs import anchors_positives_negatives
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
    return anchors_positives_negatives(kind, n, d, k, noise=0.7, seed=seed, dtype=dtype)


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


def test_chunk_size_and_offset_take_numpy_ints():
    # check_int's ints: a numpy integer (a config read with numpy, an index) is an int, returned as one.
    assert type(tiled.check_chunk_size(np.int64(7))) is int
    a = torch.randn(4, 3)
    assert torch.equal(tiled.tiled_lse(a, a, block=np.int64(2), col_offset=np.int64(0)), tiled.tiled_lse(a, a, block=2))


def _count_kernels(monkeypatch) -> list[str]:
    used: list[str] = []
    for name in ("tiled_lse", "tiled_lse_rows_cols", "tiled_per_anchor_lse", "dense_row_lse"):
        real = getattr(tiled, name)
        monkeypatch.setattr(tiled, name, lambda *args, _r=real, _n=name, **kw: used.append(_n) or _r(*args, **kw))
    return used


@pytest.mark.parametrize(("kind", "variant", "symmetric"), MODES)
def test_small_budget_routes_to_tiled_kernel(monkeypatch, kind, variant, symmetric):
    # With a 16 KiB budget the 48 × 48 (or 96 × 96) float32 logits and their gradient (18 KiB+) do not
    # fit: when the dense path would keep them (a backward with per-row losses), chunk_size=None must
    # take the tiled kernel; with the real budget it must stay dense.
    a, p, negs = _data(kind, 48, 4, 48, seed=15)
    a.requires_grad_()
    used = _count_kernels(monkeypatch)

    def run():
        used.clear()
        if kind == "ntxent":
            return nt_xent(a, p, temperature=0.3, reduction="none")
        return info_nce(a, p, negs, temperature=0.3, variant=variant, symmetric=symmetric, reduction="none")

    dense_out = run()
    assert not any(u.startswith("tiled") for u in used)
    monkeypatch.setattr(tiled, "DENSE_MEMORY_BUDGET_BYTES", 16 * 1024)
    tiled_out = run()
    assert used and all(u.startswith("tiled") for u in used)
    torch.testing.assert_close(tiled_out, dense_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("kind", "variant", "grad", "reduction"),
    [
        ("inbatch", "infonce", True, "mean"),
        ("inbatch", "dcl", True, "sum"),
        ("shared", "dcl", True, "mean"),
        ("ntxent", None, True, "mean"),
        ("inbatch", "infonce", False, "none"),
        ("shared", "infonce", False, "mean"),
        ("ntxent", None, False, "none"),
    ],
)
def test_streamed_dense_path_ignores_the_budget(monkeypatch, kind, variant, grad, reduction):
    # A mean/sum with a backward (gradient ahead) or a forward without one streams blocks of rows in
    # memory linear in N + M, so chunk_size=None stays dense even when the N × M logits exceed the budget.
    a, p, negs = _data(kind, 48, 4, 48, seed=16)
    a.requires_grad_(grad)
    used = _count_kernels(monkeypatch)
    monkeypatch.setattr(tiled, "DENSE_MEMORY_BUDGET_BYTES", 16 * 1024)
    if kind == "ntxent":
        nt_xent(a, p, temperature=0.3, reduction=reduction)
    else:
        info_nce(a, p, negs, temperature=0.3, variant=variant, reduction=reduction)
    assert used == ["dense_row_lse"]
    # Streamed: dense whatever the budget while a 16 MiB block holds >= 64 rows (M <= 65,536 in float32).
    assert plan_chunk_size(65536, 65536, 4, None, keeps_logits=False) is None
    assert plan_chunk_size(65537, 65537, 4, None, keeps_logits=False) == tiled.DEFAULT_CHUNK_SIZE
    assert plan_chunk_size(65536, 65536, 8, None, keeps_logits=False) == tiled.DEFAULT_CHUNK_SIZE
    assert plan_chunk_size(4096, 4096, 4, 8, keeps_logits=False) == 8  # an int still forces tiling


def test_keeps_logits():
    x = torch.randn(3, 2)
    y = torch.randn(3, 2, requires_grad=True)
    assert tiled.keeps_logits("none", x, y)
    assert not tiled.keeps_logits("mean", x, y) and not tiled.keeps_logits("sum", x, y)
    assert not tiled.keeps_logits("none", x, x)  # nothing requires grad: no backward
    with torch.no_grad():
        assert not tiled.keeps_logits("none", x, y)


# ---------------------------------------------------------------------------------------------------
# Dense path: gradient ahead, streamed forward, unshifted GEMM
# ---------------------------------------------------------------------------------------------------


def _lse_reference(q, k, exclude, diagonal, col_offset):
    s = q @ k.T
    rows = torch.arange(q.shape[0])
    cols = rows + col_offset
    if diagonal is not None:  # given values equal to S_ii; their gradient is S_ii's, as in dense_row_lse
        s = s.index_put((rows, cols), diagonal + (s[rows, cols] - s[rows, cols].detach()))
    if exclude:
        s = s.index_put((rows, cols), torch.tensor(float("-inf"), dtype=s.dtype))
    return torch.logsumexp(s, dim=1)


@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])  # 300: logits beyond ±60, the shifted GEMM
@pytest.mark.parametrize(
    ("exclude", "with_diag", "col_offset"), [(False, False, 0), (True, False, 0), (False, True, 3), (True, False, 5)]
)
@pytest.mark.parametrize("upstream", ["mean", "sum", "weighted"])
def test_grad_ahead_equals_reference(monkeypatch, scale, exclude, with_diag, col_offset, upstream):
    # Small blocks (3 rows) so that several blocks, the first-block write of ∂K and a ragged last block run.
    monkeypatch.setattr(tiled, "_DENSE_BLOCK_BYTES", 3 * 16 * 8)
    g = torch.Generator().manual_seed(21)
    n, m, d = 10, 16, 5
    q0 = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1) * scale
    k0 = torch.nn.functional.normalize(torch.randn(m, d, generator=g, dtype=torch.float64), dim=1)
    diag = (q0 * k0[col_offset : col_offset + n]).sum(1) if with_diag else None
    weights = {"mean": torch.full((n,), 1.0 / n), "sum": torch.ones(n), "weighted": torch.rand(n, generator=g)}
    w = weights[upstream].to(torch.float64)
    out = {}
    for name in ("ahead", "lazy", "reference"):
        q = q0.clone().requires_grad_()
        k = k0.clone().requires_grad_()
        if name == "reference":
            lse = _lse_reference(q, k, exclude, diag, col_offset)
        else:
            lse = tiled.dense_row_lse(
                q, k, exclude_diagonal=exclude, diagonal=diag, col_offset=col_offset, grad_ahead=name == "ahead"
            )
        (lse * w).sum().backward()
        out[name] = (lse.detach(), q.grad, k.grad)
    for name in ("ahead", "lazy"):
        _assert_same(out[name], out["reference"], rtol=1e-10, atol=1e-10)


def test_grad_ahead_twice_and_retain_graph():
    # The gradient made ahead is scaled, never modified in place: two backwards give the same result.
    q = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    loss = tiled.dense_row_lse(q, k, grad_ahead=True).mean()
    g1 = torch.autograd.grad(loss, (q, k), retain_graph=True)
    g2 = torch.autograd.grad(2 * loss, (q, k))
    _assert_same([2 * x for x in g1], g2, rtol=1e-14, atol=0)


@pytest.mark.parametrize("grad_ahead", [False, True])
@pytest.mark.parametrize("exclude", [False, True])
def test_dense_gradcheck(grad_ahead, exclude):
    # gradcheck feeds one-hot upstream gradients: with grad_ahead that is the exact recompute branch.
    g = torch.Generator().manual_seed(22)
    q = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    f = lambda q, k: tiled.dense_row_lse(q, k, exclude_diagonal=exclude, grad_ahead=grad_ahead)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k))
    assert torch.autograd.gradcheck(lambda q, k: f(q, k).mean(), (q, k))  # the uniform (scaled) branch


def test_grad_ahead_flag_validated():
    q = torch.randn(3, 2)
    with pytest.raises(TypeError, match="^grad_ahead"):
        tiled.dense_row_lse(q, q, grad_ahead=1)


def test_forward_only_streams_with_one_block_buffer(monkeypatch):
    # Without a backward, no N × M buffer is made: every tensor allocated by the sweep is at most one block.
    monkeypatch.setattr(tiled, "_DENSE_BLOCK_BYTES", 4 * 64 * 4)  # 4 rows of 64 float32 candidates
    q, k = torch.randn(40, 3), torch.randn(64, 3)
    sizes = []
    real = torch.Tensor.new_empty
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *s, **kw: sizes.append(s) or real(self, *s, **kw))
    lse = tiled.dense_row_lse(q, k)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.T, dim=1))
    assert sizes and all(
        torch.Size(s[0] if len(s) == 1 and isinstance(s[0], tuple) else s).numel() <= 4 * 64 for s in sizes
    )


def test_streamed_dense_memory_is_linear(tmp_path):
    # N = 16,384: the N × N float32 logits alone would be 1 GiB. Forward + backward of the mean loss with
    # chunk_size=None must stay far below that (one 16 MiB block plus O(N·D)): measured in a child.
    import subprocess
    import sys

    code = (
        "import resource, torch\n"
        "from contrastlab.losses import info_nce\n"
        "torch.set_num_threads(1)\n"
        "a = torch.randn(16384, 64, requires_grad=True); p = torch.randn(16384, 64, requires_grad=True)\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "info_nce(a, p).backward()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    grown_kib = int(out.stdout.strip())
    assert grown_kib < 200 * 1024, f"peak RSS grew by {grown_kib / 1024:.0f} MiB"


@pytest.mark.parametrize("variant", ["infonce", "dcl"])
def test_stripes_equal_the_naive_loop_and_square_tiles(variant):
    """A mean over tiles of side 96 at N = 130 runs as full-width stripes of 96² // 130 = 70 rows (≥ 64)."""
    assert tiled.stripe_rows(96, 130) == 70 and tiled.stripe_rows(90, 130) is None
    g = torch.Generator().manual_seed(11)
    a = torch.randn(130, 6, generator=g, dtype=torch.float64)
    p = a + 0.5 * torch.randn(130, 6, generator=g, dtype=torch.float64)
    grads = []
    for reduction in ("mean", "none"):  # "none" keeps unequal row gradients possible: square tiles
        x, y = a.clone().requires_grad_(), p.clone().requires_grad_()
        loss = info_nce(x, y, temperature=0.2, variant=variant, reduction=reduction, chunk_size=96).mean()
        loss.backward()
        grads.append((loss.detach(), x.grad, y.grad))
    ref = torch.tensor(info_nce_loop(a, p, None, 0.2, variant, False, True), dtype=torch.float64).mean()
    torch.testing.assert_close(grads[0][0], ref, rtol=1e-10, atol=0)
    for got, want in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-13)
