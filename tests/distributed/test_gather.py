import pytest
import torch

from contrastlab import distributed as cd
from contrastlab.distributed.testing import CASES, check_parity, split_sizes
from contrastlab.losses import info_nce, nt_xent, supcon


def test_defaults_without_process_group():
    assert cd.rank() == 0 and cd.world_size() == 1 and not cd.is_distributed()
    x = torch.randn(3, 2)
    g, off = cd.gather_with_grad(x)
    assert g is x and off == 0
    assert cd.gather_no_grad(x) is x


def test_single_process_shares_equal_the_losses():
    a, p = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    torch.testing.assert_close(cd.info_nce_gathered(a, p, symmetric=True), info_nce(a, p, symmetric=True))
    torch.testing.assert_close(cd.nt_xent_gathered(a, p), nt_xent(a, p))
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    torch.testing.assert_close(cd.supcon_gathered(a, y), supcon(a, y))


def test_split_sizes():
    assert split_sizes(11, 4) == [3, 3, 3, 2]
    assert sum(split_sizes(13, 3)) == 13


def test_case_registry_covers_every_loss_and_mode():
    names = {c.name for c in CASES}
    for mode in ("in-batch", "shared", "per-anchor"):
        for variant in ("infonce", "dcl"):
            assert any(n.startswith(f"info_nce/{mode}/{variant}") for n in names)
    assert {"nt_xent", "supcon"} <= names


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_parity_with_single_process(world):
    report = check_parity(world)
    for (name, dtype), (loss_err, grad_err) in report.items():
        tol = 1e-6 if dtype == torch.float64 else 1e-5
        assert loss_err <= tol, (name, dtype, loss_err)
        assert grad_err <= tol, (name, dtype, grad_err)
