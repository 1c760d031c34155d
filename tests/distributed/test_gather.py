import pytest
import torch

from contrastlab import distributed as cd
from contrastlab.losses import info_nce, nt_xent, supcon, tiled
from contrastlab.losses.weince import GlobalBetaConfig, WEINCELoss, global_tail_beta, weince
from tests.distributed.parity import CASES, check_parity, split_sizes


def test_defaults_without_process_group():
    assert cd.rank() == 0 and cd.world_size() == 1 and not cd.is_distributed()
    x = torch.randn(3, 2)
    g, off = cd.gather_with_grad(x)
    assert g is x and off == 0
    assert cd.gather_no_grad(x) is x


def test_single_process_shares_equal_the_losses():
    a, p = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    # gather=True without a process group is a gather that does nothing: the same numbers, bit for bit
    assert torch.equal(info_nce(a, p, symmetric=True, gather=True), info_nce(a, p, symmetric=True))
    assert torch.equal(nt_xent(a, p, gather=True), nt_xent(a, p))
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    assert torch.equal(supcon(a, y, gather=True), supcon(a, y))


def test_split_sizes():
    assert split_sizes(11, 4) == [3, 3, 3, 2]
    assert sum(split_sizes(13, 3)) == 13


def test_case_registry_covers_every_loss_and_mode():
    names = {c.name for c in CASES}
    for mode in ("in-batch", "shared", "per-anchor"):
        for variant in ("infonce", "dcl"):
            assert any(n.startswith(f"info_nce/{mode}/{variant}") for n in names)
    assert {"nt_xent", "supcon", "nt_xent/tiled"} <= names
    for variant in ("infonce", "dcl"):
        for sym in (False, True):
            assert f"info_nce/in-batch/{variant}/symmetric={sym}/tiled" in names
    for beta_mode in ("per_anchor", "one", "global_ema"):
        assert f"weince/simclr/{beta_mode}" in names
    assert any("aux_top_m" in n for n in names)
    assert {"weince/simclr/per_anchor/chunk=3", "weince/simclr/per_anchor/crowded"} <= names


@pytest.mark.parametrize("excl", [False, True])
@pytest.mark.parametrize("offset", [0, 3, 8])
@pytest.mark.parametrize("kernel", ["dense", "tiled3", "tiled13", "rows_cols"])
def test_col_offset_moves_the_diagonal(kernel, offset, excl):
    g = torch.Generator().manual_seed(offset)
    q = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(13 if kernel != "rows_cols" else 5 + offset, 4, generator=g, dtype=torch.float64)
    k.requires_grad_()
    diag = (q * k[offset : offset + 5]).sum(1).detach()
    kw = {"exclude_diagonal": excl, "diagonal": diag, "col_offset": offset}
    s = q @ k.T
    if excl:
        s = s.index_put((torch.arange(5), offset + torch.arange(5)), torch.tensor(float("-inf"), dtype=s.dtype))
    if kernel == "rows_cols":
        row, col = tiled.tiled_lse_rows_cols(q, k, block=2, **kw)
        out, ref = row.sum() + col.sum(), torch.logsumexp(s, 1).sum() + torch.logsumexp(s, 0).sum()
    else:
        lse = (
            tiled.dense_row_lse(q, k, **kw) if kernel == "dense" else tiled.tiled_lse(q, k, block=int(kernel[5:]), **kw)
        )
        out, ref = lse.sum(), torch.logsumexp(s, 1).sum()
    torch.testing.assert_close(out, ref)
    for got, want in zip(torch.autograd.grad(out, (q, k)), torch.autograd.grad(ref, (q, k)), strict=True):
        torch.testing.assert_close(got, want)


def test_col_offset_rejects_bad_values():
    q = torch.randn(3, 2)
    with pytest.raises(ValueError, match="col_offset"):
        tiled.tiled_lse(q, q, block=2, col_offset=-1)
    with pytest.raises(TypeError, match="col_offset"):
        tiled.dense_row_lse(q, q, col_offset=1.0)


def test_weince_single_process_share_and_switches():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(12, 6, generator=g, dtype=torch.float64)
    b = a + 0.5 * torch.randn(12, 6, generator=g, dtype=torch.float64)
    kw = {"beta_mode": "global_ema", "min_tail": 12, "beta_ema": 3.0, "global_beta": GlobalBetaConfig(min_tail=64)}
    loss, stats = weince(a, b, return_stats=True, **kw)
    share, share_stats = weince(a, b, return_stats=True, gather=True, **kw)
    torch.testing.assert_close(share, loss)
    torch.testing.assert_close(share_stats.beta_ema, stats.beta_ema)
    torch.testing.assert_close(weince(a, b, gather=True, **kw), loss)  # a no-op without a process group
    module = WEINCELoss(beta_mode="global_ema", gather=True)
    torch.testing.assert_close(module(a, b), weince(a, b, beta_mode="global_ema"))
    with pytest.raises(TypeError, match="gather"):
        WEINCELoss(gather=1)


def test_pooled_global_tail_equals_the_full_one():
    # each "rank" keeps its k_tail largest values; the pooled fit with the global count is the global fit
    vals = torch.rand(6, 400, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 1.8 - 0.9
    k_tail = int(max(64, 0.05 * vals.numel()))
    pool = torch.cat([torch.topk(part.reshape(-1), k_tail).values for part in vals.chunk(3)])
    full = global_tail_beta(vals, min_tail=64)
    assert full is not None and global_tail_beta(pool, min_tail=64, total=vals.numel()) == full
    with pytest.raises(ValueError, match="total"):
        global_tail_beta(vals, total=10)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_parity_with_single_process(world):
    report = check_parity(world)
    for (name, dtype), (loss_err, grad_err) in report.items():
        tol = 1e-6 if dtype == torch.float64 else 1e-5
        assert loss_err <= tol, (name, dtype, loss_err)
        # Float32 WEINCE gradients of views within ~1e-5 of s = 1 carry the rounding of float32 GEMMs times
        # the Weibit slope 1/(1 − s): against float64 they agree to 4e-4 (test_weince.py), and the fused
        # single process and the streamed shares round differently (measured 1.4e-4 and 9.5e-5 for R = 2, 4).
        # Shares that skipped the float64 recomputation of the crowded shortfalls measured 0.10.
        grad_tol = 5e-4 if name.endswith("/crowded") and dtype == torch.float32 else tol
        assert grad_err <= grad_tol, (name, dtype, grad_err)
