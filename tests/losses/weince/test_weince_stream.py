"""Streamed WEINCE: equal to the dense kernel and to the formula across block sizes (ragged last blocks,
blocks that split ties), the statistics the same as those of the whole matrix, float64 gradcheck, and
memory that never holds a 2N × 2N tensor."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from contrastlab.losses import weince
from contrastlab.losses.weince import ENDPOINT_SHORTFALL, GlobalBetaConfig, anchor_tail_stats, global_tail_beta
from contrastlab.losses.weince.stream import STREAM_BLOCK_BYTES, block_anchors, gather_dot
from tests.losses.weince._fixed_statistics import FIXED_STATISTICS, FROZEN_GLOBAL_BETA, float64_views

GB = GlobalBetaConfig(min_tail=64)  # a global tail of ≥ 10 points at these sizes: β_t moves


def _views(n: int, d: int, seed: int, dtype=torch.float64, corr: float = 0.7):
    g = torch.Generator().manual_seed(seed)
    za = torch.randn(n, d, generator=g, dtype=dtype)
    return za, corr * za + (1 - corr) * torch.randn(n, d, generator=g, dtype=dtype)


def _tied(n: int, d: int, seed: int):
    """Views with exact ties: every sample appears three times (rows 0, 1, 2 of a group identical), so
    each anchor's negatives hold duplicated cosines, and blocks of 2 or 4 anchors split the groups."""
    za, zb = _views((n + 2) // 3, d, seed)
    idx = torch.arange(n) // 3
    return za[idx].clone(), zb[idx].clone()


def _run(za, zb, chunk, reduction="mean", **kw):
    """Loss, gradients (rows weighted unequally for "none") and statistics of one call."""
    a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
    loss, st = weince(a, b, chunk_size=chunk, reduction=reduction, return_stats=True, **kw)
    w = torch.linspace(0.5, 1.5, loss.numel(), dtype=loss.dtype).reshape(loss.shape)
    ga, gb = torch.autograd.grad((loss * w).sum(), [a, b])
    return loss.detach(), ga, gb, st


def _reference(za, zb, st, *, tau=0.5, eps=1e-6, aux_top_m=0, aux_weight=0.5):
    """The formula on the whole 2N × 2N matrix with autograd, λ_i, β_i (and β_t) held as the given constants."""
    a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
    z = torch.nn.functional.normalize(torch.cat([a, b]), dim=1)
    s = z @ z.T
    n2 = s.shape[0]
    eye = torch.eye(n2, dtype=torch.bool)
    pos = (torch.arange(n2) + n2 // 2) % n2
    lam, beta = st.tail.lam[:, None], st.beta[:, None]
    weibit = -torch.log1p(-s.clamp(-1.0, 1.0 - eps))
    logits = ((1 - lam) * s / tau + lam * beta * weibit).masked_fill(eye, float("-inf"))
    rows = torch.arange(n2)
    loss = torch.logsumexp(logits, 1) - logits[rows, pos]
    if aux_top_m:
        neg = s.detach().masked_fill(eye, float("-inf"))
        neg[rows, pos] = float("-inf")
        idx = torch.cat([pos[:, None], torch.topk(neg, min(aux_top_m, n2 - 2), dim=1).indices], 1)
        p = (s / tau).gather(1, idx)
        w = float(st.beta_ema) * -torch.log1p(-(p * tau).clamp(-1.0, 1.0 - eps))
        aux = torch.logsumexp(w, 1) - w[:, 0] + torch.logsumexp(p, 1) - p[:, 0]
        loss = loss + aux_weight * aux
    return loss, a, b


def _assert_stats_equal(st, ref, rtol=1e-12):
    for name in ("lam", "beta_hat", "r2", "delta_aic", "rho", "rho0"):
        torch.testing.assert_close(getattr(st.tail, name), getattr(ref.tail, name), rtol=rtol, atol=1e-12)
    torch.testing.assert_close(st.beta, ref.beta, rtol=rtol, atol=1e-12)
    assert st.tail.k_tail == ref.tail.k_tail and st.tail.n_eff == ref.tail.n_eff
    if ref.beta_ema is None:
        assert st.beta_ema is None
    else:
        torch.testing.assert_close(st.beta_ema, ref.beta_ema, rtol=1e-12, atol=0)
        assert st.beta_global_hat == pytest.approx(ref.beta_global_hat, rel=1e-12)


MODES = [
    {},
    {"beta_mode": "one"},
    {"beta_mode": "global_ema", "global_beta": GB},
    {"fixed_lambda": 1.0},
]


@pytest.mark.parametrize("kw", MODES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("tied", [False, True])
def test_streamed_equals_the_dense_kernel_across_block_sizes(kw, reduction, tied):
    """Blocks of 1, 2, 4, 7 (ragged last blocks of 2N = 42 views), 42 (one block) and 64 anchors give the
    fused dense kernel's loss, gradients and statistics in float64; with tied views the blocks split the
    groups of identical rows."""
    za, zb = _tied(21, 5, seed=3) if tied else _views(21, 5, seed=3)
    dense = _run(za, zb, None, reduction, min_tail=8, **kw)
    assert float(dense[3].tail.lam.max()) > 0.05 or kw  # the Weibit logit is mixed in
    for chunk in (1, 2, 4, 7, 42, 64):
        got = _run(za, zb, chunk, reduction, min_tail=8, **kw)
        for x, y in zip(got[:3], dense[:3], strict=True):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
        _assert_stats_equal(got[3], dense[3])


@pytest.mark.parametrize("chunk", [1, 5, 42])
@pytest.mark.parametrize(
    "kw",
    [
        {"aux_top_m": 6, "beta_mode": "one", "global_beta": GB},
        {"aux_top_m": 50, "global_beta": GB},  # M capped at K = 2N − 2
        {"temperature": "tensor"},
        {"temperature": "tensor", "aux_top_m": 3, "beta_mode": "global_ema", "global_beta": GB},
    ],
)
def test_streamed_equals_the_formula_with_aux_terms_and_learnable_temperature(chunk, kw):
    """Paths that always stream (the top-M terms, a tensor τ) against the formula on the whole matrix with
    autograd, the τ-gradient included, and their statistics against those of the whole matrix."""
    za, zb = _views(21, 5, seed=4)
    kw = dict(kw, min_tail=8)
    tau = 0.5
    if kw.get("temperature") == "tensor":
        tau = 0.4
        kw["temperature"] = t_leaf = torch.tensor(tau, dtype=torch.float64, requires_grad=True)
    a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
    loss, st = weince(a, b, chunk_size=chunk, reduction="none", return_stats=True, **kw)
    w = torch.linspace(0.5, 1.5, loss.numel(), dtype=loss.dtype)
    inputs = [a, b] + ([t_leaf] if isinstance(kw.get("temperature"), torch.Tensor) else [])
    got = torch.autograd.grad((loss * w).sum(), inputs)

    ref_tau = t_leaf if len(inputs) == 3 else tau
    ref, ra, rb = _reference(za, zb, st, tau=ref_tau, aux_top_m=kw.get("aux_top_m", 0))
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    want = torch.autograd.grad((ref * w).sum(), [ra, rb] + inputs[2:])
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)

    z = torch.nn.functional.normalize(torch.cat([za, zb]), dim=1)
    neg = z @ z.T
    n2 = neg.shape[0]
    neg[torch.arange(n2), torch.arange(n2)] = float("-inf")
    neg[torch.arange(n2), (torch.arange(n2) + n2 // 2) % n2] = float("-inf")
    tail = anchor_tail_stats(neg, min_tail=8)
    for name in ("lam", "beta_hat", "delta_aic", "rho"):
        torch.testing.assert_close(getattr(st.tail, name), getattr(tail, name), rtol=1e-12, atol=1e-12)
    if "aux_top_m" in kw or kw.get("beta_mode") == "global_ema":
        est = global_tail_beta(neg, tail_frac=GB.tail_frac, min_tail=GB.min_tail)
        assert est is not None and st.beta_global_hat == pytest.approx(est[0], rel=1e-12)


def test_streamed_lambda_zero_is_nt_xent_and_no_grad_forward_equals():
    """λ ≡ 0 goes to NT-Xent from the streamed path too; a forward without gradient gives the same loss."""
    from contrastlab.losses import nt_xent

    za, zb = _views(12, 4, seed=6, dtype=torch.float32)
    for reduction in ("mean", "none"):
        got = weince(za, zb, fixed_lambda=0.0, chunk_size=5, reduction=reduction)
        assert torch.equal(got, nt_xent(za, zb, reduction=reduction))
    za, zb = _views(12, 4, seed=6)
    with torch.no_grad():
        for reduction in ("mean", "none"):
            torch.testing.assert_close(
                weince(za, zb, chunk_size=5, reduction=reduction, min_tail=8),
                weince(za, zb, reduction=reduction, min_tail=8),
                rtol=1e-12,
                atol=1e-12,
            )


@pytest.mark.parametrize("chunk", [None, 5])
def test_float32_streamed_loss_near_the_endpoint_equals_float64(chunk):
    """The streamed sweeps read the crowded views' shortfalls from float64 cosines (rows and columns), as the
    fused kernel does: a batch mixing crowded and ordinary views gives the float64 loss and gradients
    within the fused kernel's float32 bounds (``test_weince.py``: 1e-5 on the loss, 4e-4 on the gradients;
    without the recomputation 2.1e-4 and 4.0e-3 were measured), and its statistics equal float64's."""
    from tests.losses.weince.test_weince import _clustered

    za_c, zb_c, _ = _clustered(32, 32, 4, 0.001, seed=3)
    za_o, zb_o = _views(32, 32, seed=4, dtype=torch.float32)
    za, zb = torch.cat([za_c, za_o]), torch.cat([zb_c, zb_o])
    l32, g32a, g32b, s32 = _run(za, zb, chunk, "none")
    l64, g64a, g64b, s64 = _run(za.double(), zb.double(), chunk, "none")
    crowded = s64.tail.rho < ENDPOINT_SHORTFALL
    assert 0 < int(crowded.sum()) < crowded.numel() and float(s64.tail.rho.min()) < 1e-4
    torch.testing.assert_close(l32.double(), l64, rtol=1e-5, atol=0)
    for x, y in ((g32a, g64a), (g32b, g64b)):
        assert float((x.double() - y).norm() / y.norm()) < 4e-4
    np.testing.assert_allclose(s32.tail.lam.numpy(), s64.tail.lam.numpy(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(s32.tail.delta_aic[crowded].numpy(), s64.tail.delta_aic[crowded].numpy(), atol=1e-6)


def test_float32_streamed_equals_the_fused_kernel():
    """In float32 the streamed loss and gradients equal the fused kernel's to float32 rounding of the same
    formula (their cosines come from different GEMMs), and the statistics to the rounding those cosines
    pass on (relative 1e-4 on β̂ and ΔAIC; λ within 1e-5, the float32-vs-float64 bound of docs/weince.md)."""
    za, zb = _views(40, 16, seed=9, dtype=torch.float32)
    dense = _run(za, zb, None)
    for chunk in (3, 16):
        got = _run(za, zb, chunk)
        torch.testing.assert_close(got[0], dense[0], rtol=1e-6, atol=1e-6)
        for x, y in zip(got[1:3], dense[1:3], strict=True):
            assert float((x - y).norm() / y.norm()) < 1e-5
        torch.testing.assert_close(got[3].tail.lam, dense[3].tail.lam, rtol=0, atol=1e-5)
        torch.testing.assert_close(got[3].tail.beta_hat, dense[3].tail.beta_hat, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "kw",
    [
        *FIXED_STATISTICS,
        {"fixed_lambda": 0.4, "beta_mode": "one", "reduction": "none"},
        {"fixed_lambda": 0.5, "beta_mode": "one", "temperature": "tensor"},
    ],
)
@pytest.mark.parametrize("chunk", [1, 3])
def test_streamed_gradcheck_float64(kw, chunk):
    """With the stop-gradient statistics held fixed (λ fixed; β = 1 or a frozen β_t) the streamed gradient,
    τ's included, matches finite differences."""
    kw = dict(kw, global_beta=FROZEN_GLOBAL_BETA, chunk_size=chunk)
    za, zb, _ = float64_views()
    inputs = [za, zb]
    if kw.get("temperature") == "tensor":
        del kw["temperature"]
        inputs.append(torch.tensor(0.4, dtype=torch.float64, requires_grad=True))
        assert torch.autograd.gradcheck(lambda a, b, t: weince(a, b, temperature=t, **kw), inputs)
    else:
        assert torch.autograd.gradcheck(lambda a, b: weince(a, b, temperature=0.4, **kw), inputs)


class _LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an ATen operation returns (allocations
    included: ``empty``, ``mm``'s result, every temporary), through the dispatcher."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize(
    "kw",
    [{}, {"reduction": "none"}, {"beta_mode": "one"}, {"temperature": "tensor"}, {"aux_top_m": 4}, "crowded"],
)
def test_streamed_memory_never_holds_the_2n_by_2n_matrix(kw):
    """Forward and backward in blocks of 8 anchors of 2N = 160 views: no ATen operation returns a tensor
    of more than 2·2N·8 elements (the sweep's two block buffers, allocated as one), far below the
    2N × 2N = 25,600 of the dense kernel, which the same hook sees (the check can fail). Float32 views
    crowding the endpoint add the float64 recomputation, within the same bound. The global β_t's pool
    (``beta_mode="global_ema"``, the top-M terms) holds tail_frac of all negatives by definition: here
    ≥ 1,024 values, below the bound too."""
    n, d, chunk = 80, 6, 8
    if kw == "crowded":
        from tests.losses.weince.test_weince import _clustered

        za, zb, _ = _clustered(n, d, 4, 0.001, seed=2)
        kw = {}
    else:
        za, zb = _views(n, d, seed=5, dtype=torch.float32)
    kw = dict(kw)
    if kw.get("temperature") == "tensor":
        kw["temperature"] = torch.tensor(0.5, requires_grad=True)
    a, b = za.clone().requires_grad_(), zb.clone().requires_grad_()
    bound = 2 * (2 * n) * chunk
    with _LargestTensor() as seen:
        loss = weince(a, b, chunk_size=chunk, **kw)
        torch.autograd.grad(loss.sum(), [a, b])
    assert 0 < seen.largest <= bound < (2 * n) ** 2
    with _LargestTensor() as dense:
        torch.autograd.grad(weince(a, b).sum(), [a, b])
    assert dense.largest >= (2 * n) ** 2


def test_block_anchors_and_gather_dot():
    """The automatic block holds STREAM_BLOCK_BYTES of a block's rows; gather_dot's values and gradients
    are those of the gathered rows' dot products, in any block of rows."""
    assert block_anchors(4096, 4, None) * 4096 * 4 == STREAM_BLOCK_BYTES
    assert block_anchors(32768, 4, None) == 64 and block_anchors(10**9, 8, None) == 1
    assert block_anchors(100, 4, 7) == 7
    g = torch.Generator().manual_seed(1)
    q = torch.randn(7, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(9, 3, generator=g, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, 9, (7, 4), generator=g)
    want = (q.unsqueeze(1) * k[idx]).sum(-1)
    w = torch.randn(7, 4, generator=g, dtype=torch.float64)
    ref = torch.autograd.grad((want * w).sum(), [q, k])
    for rows in (1, 3, 7):
        got = gather_dot(q, k, idx, rows=rows)
        torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
        for x, y in zip(torch.autograd.grad((got * w).sum(), [q, k]), ref, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("chunk", [0, -1, 2.0, True])
def test_bad_chunk_size_names_the_argument(chunk):
    za, zb = _views(4, 3, seed=1)
    with pytest.raises((ValueError, TypeError), match="chunk_size"):
        weince(za, zb, chunk_size=chunk)


def test_temperature_gradient_alone_equals_the_one_beside_the_inputs():
    """With only τ requiring a gradient the streamed backward skips the sweep (τ's factor is made in the
    forward) and gives the same ∂L/∂τ as when the inputs require one too."""
    za, zb = _views(10, 4, seed=8)
    t = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    (alone,) = torch.autograd.grad(weince(za, zb, temperature=t, min_tail=8, chunk_size=3), [t])
    a = za.clone().requires_grad_()
    beside, _ = torch.autograd.grad(weince(a, zb, temperature=t, min_tail=8, chunk_size=3), [t, a])
    assert float(alone) != 0.0
    torch.testing.assert_close(alone, beside, rtol=1e-13, atol=0)
