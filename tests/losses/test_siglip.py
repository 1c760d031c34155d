"""SigLIP against the paper's pseudocode (naive loops, float64), gradcheck, open_clip, and two gloo ranks."""

import importlib
import math
import os
import tempfile

import pytest
import torch
import torch.distributed as dist

from contrastlab.losses import LearnableTemperature, SigLIPLoss, siglip
from tests import peers
from tests._spawn import spawn_ranks

# the module (the package's name `siglip` is the function)
siglip_module = importlib.import_module("contrastlab.losses.siglip")


def siglip_loop(a, p, tau, b, normalize):
    """Per-anchor −Σ_j log σ(z_ij (t x̂_i·ŷ_j + b)), z_ii = 1 else −1: Algorithm 1 of Zhai et al. 2023, as loops."""
    n, d = a.shape
    out = []
    for i in range(n):
        li = 0.0
        for j in range(n):
            dot = sum(float(a[i, k]) * float(p[j, k]) for k in range(d))
            if normalize:
                na = math.sqrt(sum(float(a[i, k]) ** 2 for k in range(d)))
                nb = math.sqrt(sum(float(p[j, k]) ** 2 for k in range(d)))
                dot /= na * nb
            logit = dot / tau + b
            z = 1.0 if i == j else -1.0
            x = z * logit  # −log σ(x) = log(1 + e^{−x}), written stably for either sign
            li += math.log1p(math.exp(-x)) if x >= 0 else -x + math.log1p(math.exp(x))
        out.append(li)
    return torch.tensor(out, dtype=torch.float64)


def _pair(n, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=dtype)
    return a, a + 0.8 * torch.randn(n, d, generator=g, dtype=dtype)


@pytest.mark.parametrize("n", [1, 2, 7])
@pytest.mark.parametrize("chunk_size", [None, 1, 3])
@pytest.mark.parametrize(("tau", "b", "normalize"), [(0.1, -10.0, True), (0.5, 0.3, True), (2.0, -1.0, False)])
def test_matches_the_papers_pseudocode(n, chunk_size, tau, b, normalize):
    a, p = _pair(n, 5, seed=n)
    ref = siglip_loop(a, p, tau, b, normalize)
    kw = {"temperature": tau, "bias": b, "normalize": normalize, "chunk_size": chunk_size}
    torch.testing.assert_close(siglip(a, p, reduction="none", **kw), ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(siglip(a, p, **kw), ref.sum() / n, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(siglip(a, p, reduction="sum", **kw), ref.sum(), rtol=1e-10, atol=1e-12)


def test_identical_views_closed_form():
    """x̂_i·ŷ_j = 1 for every pair (all rows the same direction): ℓ_i = softplus(−(t + b)) + (N − 1) softplus(t + b)."""
    n, t, b = 5, 10.0, -10.0
    v = torch.ones(n, 3, dtype=torch.float64)
    expected = math.log1p(math.exp(-(t + b))) + (n - 1) * math.log1p(math.exp(t + b))
    torch.testing.assert_close(
        siglip(v, 2.0 * v, temperature=1 / t, bias=b), torch.tensor(expected, dtype=torch.float64)
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_gradcheck_inputs_temperature_and_bias(reduction, chunk_size):
    a, p = _pair(5, 4, seed=3)
    a.requires_grad_()
    p.requires_grad_()
    tau = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(-1.5, dtype=torch.float64, requires_grad=True)

    def f(a, p, tau, b):
        return siglip(a, p, temperature=tau, bias=b, reduction=reduction, chunk_size=chunk_size)

    assert torch.autograd.gradcheck(f, (a, p, tau, b))


def test_gradcheck_learnable_module_parameters():
    a, p = _pair(4, 3, seed=4)
    loss = SigLIPLoss(temperature=0.3, bias=-2.0).double()

    def f(log_scale, bias):
        with torch.no_grad():
            loss.temperature.log_scale.copy_(log_scale)
            loss.bias.copy_(bias)
        return siglip(a, p, temperature=torch.exp(-log_scale), bias=bias)

    ls = loss.temperature.log_scale.detach().clone().requires_grad_()
    bb = loss.bias.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (ls, bb))
    out = loss(a, p)
    out.backward()
    assert loss.temperature.log_scale.grad is not None and loss.bias.grad is not None
    assert torch.isfinite(loss.temperature.log_scale.grad) and torch.isfinite(loss.bias.grad)


def test_module_initialises_as_the_paper():
    loss = SigLIPLoss()
    assert float(loss.temperature.log_scale.detach()) == pytest.approx(math.log(10.0), rel=1e-7)  # t' = log 10
    assert float(loss.bias.detach()) == -10.0
    assert isinstance(loss.temperature, LearnableTemperature)
    assert {n for n, _ in loss.named_parameters()} == {"temperature.log_scale", "bias"}
    fixed = SigLIPLoss(0.2, 1.0, learnable=False)
    assert list(fixed.parameters()) == []
    a, p = _pair(6, 4, seed=5)
    torch.testing.assert_close(fixed(a, p), siglip(a, p, temperature=0.2, bias=1.0))
    assert "learnable=False" in repr(fixed)


@pytest.mark.parametrize("scale,bias", [(10.0, -10.0), (3.0, 0.5)])
def test_open_clip_siglip_peer(scale, bias):
    oc = peers.open_clip_loss()
    g = torch.Generator().manual_seed(7)
    a, p = torch.randn(16, 32, generator=g), torch.randn(16, 32, generator=g)

    def grads(fn):
        xs = [a.clone().requires_grad_(), p.clone().requires_grad_()]
        out = fn(*xs)
        out.backward()
        return out.detach(), [x.grad for x in xs]

    ours, g_ours = grads(lambda x, y: siglip(x, y, temperature=1.0 / scale, bias=bias))
    peer = oc.SigLipLoss()
    s, b = torch.tensor(scale), torch.tensor(bias)
    theirs, g_theirs = grads(
        lambda x, y: peer(torch.nn.functional.normalize(x, dim=1), torch.nn.functional.normalize(y, dim=1), s, b)
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for u, v in zip(g_ours, g_theirs, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-7)


def test_no_n_by_n_tensor_is_saved_for_backward():
    """Memory linear in N: what autograd keeps for the backward has O((N + block)·D) entries, no N × N."""
    n, d = 256, 8
    a, p = _pair(n, d, seed=6, dtype=torch.float32)
    a.requires_grad_()
    p.requires_grad_()
    sizes: list[int] = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = siglip(a, p, chunk_size=16)
    loss.backward()
    assert sizes and max(sizes) <= n * d


def test_float32_streamed_equals_float64_to_rounding():
    a, p = _pair(300, 16, seed=8)
    ref = siglip(a, p)
    got = siglip(a.float(), p.float(), chunk_size=37)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=0)


#: float32 unit roundoff u = 2⁻²⁴.
_U32 = 2.0**-24


@pytest.mark.parametrize(
    ("low", "high"),
    [(-10.5, -9.5), (-30.0, 5.0), (-3.0, 3.0), (-200.0, 2.0)],  # SigLIP's negatives at init; wide; near 0; zeros
)
@pytest.mark.parametrize("m", [16, 150, 4096])
def test_softplus_row_sums_within_the_stated_float32_bound(low, high, m):
    """The product recurrence against float64 ``Σ_j log1p(1/y_ij)`` on the same float32 ``y = e⁻ᴸ``.

    Bound (first order in u): ``s`` gathers ≤ _SLICES − 1 steps of three roundings of non-negative terms,
    ``log1p`` adds ≤ 2 u (condition number ≤ 1), and the float32 sum of c = ⌈M / 16⌉ non-negative terms
    ≤ (c − 1) u; so the relative error is ≤ (3 · 15 + 2 + c − 1) u, doubled for the second-order terms.
    (``1/y`` adds one more rounding, within the doubling.) ``L < −88`` overflows to ``y = inf``, whose
    term ``1/y = 0`` is carried exactly. The naive ``log Π (1 + eᴸ)`` is shown to miss this bound on
    SigLIP's negatives.
    """
    g = torch.Generator().manual_seed(m)
    logits = low + (high - low) * torch.rand(8, m, generator=g)
    y = (-logits).exp()  # float32, > 0 or inf
    got = siglip_module._softplus_row_sums(y, torch.empty(8, 2 * -(-m // siglip_module._SLICES)))
    ref = torch.log1p(y.double().reciprocal()).sum(dim=1)
    c = -(-m // siglip_module._SLICES)
    bound = 2 * (3 * (siglip_module._SLICES - 1) + 2 + c - 1) * _U32
    assert float(((got.double() - ref).abs() / ref).max()) <= bound
    if (low, high) == (-10.5, -9.5) and m == 4096:
        naive = torch.log((1 + logits.exp()).prod(dim=1))  # 1 + eᴸ rounds: each eᴸ ≈ 4.5e-5 kept to about 1e-3
        assert float(((naive.double() - ref).abs() / ref).max()) > bound


def _siglip_and_grads(a, p, **kw):
    a, p = a.clone().requires_grad_(), p.clone().requires_grad_()
    loss = siglip(a, p, reduction="none", **kw)
    loss.sum().backward()
    return loss.detach(), a.grad, p.grad


@pytest.mark.parametrize(
    ("tau", "b", "scale"),
    [(0.01, 0.0, 1.0), (1.0, 6.5, 1.0)],  # positives' logits ≈ 100 > 88 (eᴸ overflows); 16 softplus ≈ 6.5 each
)
def test_blocks_whose_products_overflow_are_recomputed_exactly(monkeypatch, tau, b, scale):
    """float32 blocks with overflowing products take the exact fallback and match float64 (the fast path).

    Tolerance: the float32 logits carry the GEMM's rounding, ≤ D u |L|_max ≈ 1e-4 absolute at |L| ≤ 107,
    which the loss (a sum of softplus values minus the positive's logit) and σ pass on.
    """
    calls = []
    exact = siglip_module._exact_block

    def counted(lg, diag_col, grad):
        calls.append(diag_col)
        return exact(lg, diag_col, grad)

    monkeypatch.setattr(siglip_module, "_exact_block", counted)
    a, p = _pair(64, 16, seed=12)
    ref = _siglip_and_grads(a, p, temperature=tau, bias=b, chunk_size=16)
    assert calls == []  # float64: e^L stays finite up to L = 709
    got = _siglip_and_grads(a.float(), p.float(), temperature=tau, bias=b, chunk_size=16)
    assert calls  # some float32 blocks overflowed
    for u, v in zip(got, ref, strict=True):
        torch.testing.assert_close(u.double(), v, rtol=1e-5, atol=2e-4)


def test_float32_gradients_equal_float64_at_the_papers_init():
    """At t = 10, b = −10 the float32 gradient equals float64's to 1e-5 in relative norm.

    Each logit carries the float32 GEMM's rounding (≤ D u |q||k| = 128 · 6e-8 · 10 ≈ 8e-5, typically
    √D of that), which moves σ by σ(1 − σ) times as much; every other step adds a few u.
    """
    a, p = _pair(300, 16, seed=13)
    ref = _siglip_and_grads(a, p, chunk_size=37)
    got = _siglip_and_grads(a.float(), p.float(), chunk_size=37)
    for u, v in zip(got[1:], ref[1:], strict=True):
        assert float((u.double() - v).norm() / v.norm()) <= 1e-5


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"bias": float("nan")}, ValueError, "bias"),
        ({"bias": "1"}, TypeError, "bias"),
        ({"bias": torch.ones(2)}, ValueError, "bias"),
        ({"reduction": "avg"}, ValueError, "reduction"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"normalize": 1}, TypeError, "normalize"),
        ({"gather": "yes"}, TypeError, "gather"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, exc, name):
    a, p = _pair(3, 2, seed=0)
    with pytest.raises(exc, match=f"^{name}"):
        siglip(a, p, **kwargs)


def test_bad_inputs_name_themselves():
    a, p = _pair(3, 2, seed=0)
    with pytest.raises(ValueError, match="^positive"):
        siglip(a, p[:2])
    with pytest.raises(TypeError, match="^anchor"):
        siglip(a.long(), p)
    with pytest.raises(ValueError, match="^anchor"):
        siglip(torch.full_like(a, float("inf")), p)
    with pytest.raises(ValueError, match="^bias"):
        SigLIPLoss(bias=float("inf"))
    with pytest.raises(TypeError, match="^bias"):
        SigLIPLoss(bias=torch.tensor(1.0))


# ------------------------------------------------------------------------------------- two gloo ranks


def _worker(r, world, init_file, out_dir, n):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=r, world_size=world)
    try:
        a, p = _pair(n, 4, seed=11)
        sizes = [n // world + (1 if i < n % world else 0) for i in range(world)]
        s0 = sum(sizes[:r])
        la = a[s0 : s0 + sizes[r]].clone().requires_grad_()
        lp = p[s0 : s0 + sizes[r]].clone().requires_grad_()
        tau = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        b = torch.tensor(-2.0, dtype=torch.float64, requires_grad=True)
        share = siglip(la, lp, temperature=tau, bias=b, gather=True, chunk_size=2)
        share.backward()
        torch.save(
            {"share": share.detach(), "ga": la.grad, "gp": lp.grad, "gt": tau.grad, "gb": b.grad},
            os.path.join(out_dir, f"{r}.pt"),
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
def test_gather_over_two_ranks_is_exact():
    """Mean of the shares = the single-process loss; each rank's row gradients / R = the single-process ones."""
    n, world = 7, 2
    a, p = _pair(n, 4, seed=11)
    a.requires_grad_()
    p.requires_grad_()
    tau = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(-2.0, dtype=torch.float64, requires_grad=True)
    loss = siglip(a, p, temperature=tau, bias=b)
    loss.backward()
    with tempfile.TemporaryDirectory() as tmp:
        spawn_ranks(_worker, (world, os.path.join(tmp, "init"), tmp, n), world)
        parts = [torch.load(os.path.join(tmp, f"{r}.pt"), weights_only=True) for r in range(world)]
    torch.testing.assert_close(torch.stack([q["share"] for q in parts]).mean(), loss.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(torch.cat([q["ga"] for q in parts]) / world, a.grad, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(torch.cat([q["gp"] for q in parts]) / world, p.grad, rtol=1e-10, atol=1e-14)
    # τ and b are replicated: DDP averages their gradients over ranks
    torch.testing.assert_close(torch.stack([q["gt"] for q in parts]).mean(), tau.grad, rtol=1e-10, atol=0)
    torch.testing.assert_close(torch.stack([q["gb"] for q in parts]).mean(), b.grad, rtol=1e-10, atol=0)


def test_registered_and_trainable_through_the_job_with_its_bias_field():
    from contrastlab.losses import LOSSES
    from contrastlab.train.job.config import LossConfig
    from contrastlab.train.job.runner import call_loss

    assert LOSSES["siglip"] is siglip
    cfg = LossConfig(name="siglip", temperature=0.2, bias=-3.0)
    a, p = _pair(5, 4, seed=9)
    torch.testing.assert_close(call_loss(cfg, a, p), siglip(a, p, temperature=0.2, bias=-3.0), rtol=0, atol=0)
