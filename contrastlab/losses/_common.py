"""Pieces shared by every loss: normalisation, temperature handling, reduction, output checks."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from contrastlab._checks import check_choice, check_positive_float

__all__ = [
    "distributed_world_size",
    "l2_normalize",
    "TemperatureLike",
    "resolve_inverse_temperature",
    "reduce",
    "REDUCTIONS",
    "check_finite_loss",
]

REDUCTIONS = ("mean", "sum", "none")

#: A temperature: a float > 0, a 0-d positive tensor, or a module returning one (``LearnableTemperature``).
TemperatureLike = float | Tensor | nn.Module


def distributed_world_size() -> int:
    """Number of torch.distributed ranks (1 without a process group); decides whether ``gather`` acts."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def l2_normalize(x: Tensor) -> Tensor:
    """Scale each row of ``x`` (shape ``(..., D)``) to unit Euclidean norm.

    A zero row stays the zero vector: it has cosine similarity 0 with every vector, so in a loss it
    contributes a logit of exactly 0. Its gradient is the identity (the norm's subgradient at 0 is 0),
    which is finite; this is the documented meaning of a zero embedding throughout contrastlab.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / torch.where(norm > 0, norm, torch.ones_like(norm))


def resolve_inverse_temperature(
    temperature: TemperatureLike, dtype: torch.dtype, device: torch.device
) -> Tensor | float:
    """Return 1/τ as a Python float (fixed τ) or a 0-d tensor (learnable τ, keeps the autograd graph).

    Raises:
        TypeError: ``temperature`` is of an unsupported type.
        ValueError: τ ≤ 0, non-finite, or so small that 1/τ overflows ``dtype``.
    """
    if isinstance(temperature, nn.Module):
        temperature = temperature()
    if isinstance(temperature, Tensor):
        if temperature.numel() != 1:
            raise ValueError(f"temperature must be a scalar, got a tensor of shape {tuple(temperature.shape)}")
        if not temperature.is_floating_point():
            raise TypeError(f"temperature must be a floating-point tensor, got dtype {temperature.dtype}")
        t = temperature.reshape(()).to(dtype=dtype, device=device)
        tv = float(t.detach())
        if not (tv > 0 and torch.isfinite(t.detach())):
            raise ValueError(f"temperature must be finite and > 0, got {tv}")
        inv = 1.0 / t
        if not bool(torch.isfinite(inv.detach())):
            raise ValueError(f"temperature {tv} is too small: 1/temperature overflows {dtype}")
        return inv
    tv = check_positive_float("temperature", temperature)
    inv_f = 1.0 / tv
    if inv_f > torch.finfo(dtype).max:
        raise ValueError(f"temperature {tv} is too small: 1/temperature overflows {dtype}")
    return inv_f


def reduce(per_sample: Tensor, reduction: str) -> Tensor:
    """Apply ``reduction`` ("mean", "sum" or "none") to per-sample losses of shape ``(N,)``."""
    check_choice("reduction", reduction, REDUCTIONS)
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    return per_sample


def check_finite_loss(loss: Tensor, hint: str) -> Tensor:
    """Raise ``ValueError`` instead of returning a non-finite loss (never a silent NaN)."""
    if not bool(torch.isfinite(loss.detach()).all()):
        raise ValueError(
            f"{hint}: the loss is not finite; the similarities overflowed (use normalize=True, "
            "a larger temperature or smaller inputs)"
        )
    return loss
