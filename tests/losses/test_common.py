"""The loss modules' common base: every hyperparameter a module is built with reaches its function."""

import inspect

import pytest
import torch

from contrastlab.losses import (
    DebiasedInfoNCELoss,
    DistillKLLoss,
    HardNegativeInfoNCELoss,
    InfoNCELoss,
    LearnableTemperature,
    MarginMSELoss,
    NTXentLoss,
    SupConLoss,
    debiased_info_nce,
    distill_kl,
    hard_negative_info_nce,
    info_nce,
    margin_mse,
    nt_xent,
    supcon,
)
from contrastlab.losses._common import LossModule, check_inputs
from contrastlab.losses.support_corrected import SupportCorrectedInfoNCELoss, support_corrected_info_nce


def _inputs(kind: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    a, p = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, 4, generator=g, dtype=torch.float64)
    if kind == "labels":
        return a, torch.tensor([0, 0, 1, 1, 2, 2])
    negs = torch.randn(6, 3, 4, generator=g, dtype=torch.float64)
    if kind == "per_anchor":
        return a, p, negs
    if kind == "teacher":
        return a, p, negs, torch.randn(6, 4, generator=g, dtype=torch.float64)
    return a, p


# Every argument set away from its default, so that a module dropping one gives other numbers.
CASES = [
    (InfoNCELoss, info_nce, "pair", {"variant": "dcl", "symmetric": True, "normalize": False, "chunk_size": 3}),
    (NTXentLoss, nt_xent, "pair", {"normalize": False, "reduction": "sum", "chunk_size": 3}),
    (SupConLoss, supcon, "labels", {"normalize": False, "reduction": "sum"}),
    (DebiasedInfoNCELoss, debiased_info_nce, "pair", {"tau_plus": 0.05, "simclr": True, "normalize": False}),
    (HardNegativeInfoNCELoss, hard_negative_info_nce, "pair", {"tau_plus": 0.05, "beta": 0.7, "simclr": True}),
    (SupportCorrectedInfoNCELoss, support_corrected_info_nce, "per_anchor", {"variant": "dcl", "normalize": False}),
    (MarginMSELoss, margin_mse, "teacher", {"normalize": True, "reduction": "sum"}),
    (DistillKLLoss, distill_kl, "teacher", {"teacher_temperature": 2.0, "normalize": True, "reduction": "sum"}),
]


@pytest.mark.parametrize(("cls", "fn", "kind", "options"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_module_passes_every_hyperparameter_to_its_function(cls, fn, kind, options):
    options = {"temperature": 0.3, **options}
    module = cls(**options)
    assert isinstance(module, LossModule)
    assert tuple(module.hyperparameters()) == tuple(inspect.signature(cls).parameters)
    assert module.hyperparameters().items() >= options.items()
    inputs = _inputs(kind)
    assert torch.equal(module(*inputs), fn(*inputs, **options))


def test_a_learnable_temperature_is_a_submodule_and_shows_as_learnable():
    module = InfoNCELoss(temperature=LearnableTemperature(0.2))
    assert [name for name, _ in module.named_parameters()] == ["temperature.log_scale"]
    assert module.extra_repr().startswith("temperature=learnable, variant='infonce'")


def test_check_inputs_returns_rows_dtype_and_inverse_temperature_and_names_the_arguments():
    a, p = torch.randn(3, 4), torch.randn(3, 4)
    negs = torch.randn(5, 4, dtype=torch.float64)  # a float64 input makes the loss compute in float64
    assert check_inputs(a, p, negs, temperature=0.5, reduction="sum") == (3, torch.float64, 2.0)
    with pytest.raises(ValueError, match="z_b must have the same shape as z_a"):
        check_inputs(a, p[:2], temperature=0.5, reduction="mean", names=("z_a", "z_b"))
    with pytest.raises(ValueError, match="negatives must have embedding dimension D = 4"):
        check_inputs(a, p, torch.randn(5, 3), temperature=0.5, reduction="mean")
    with pytest.raises(ValueError, match="reduction"):
        check_inputs(a, p, temperature=0.5, reduction="max")
