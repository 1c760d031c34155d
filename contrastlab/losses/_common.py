"""Pieces shared by every loss: normalisation, temperature handling, reduction, output checks."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab._checks import check_positive_float

__all__ = [
    "gather_rows",
    "l2_normalize",
    "TemperatureLike",
    "resolve_inverse_temperature",
    "REDUCTIONS",
    "check_finite_loss",
    "device_of",
]

REDUCTIONS = ("mean", "sum", "none")

#: A temperature: a float > 0, a 0-d positive tensor, or a module returning one (``LearnableTemperature``).
TemperatureLike = float | Tensor | nn.Module


def gather_rows(x: Tensor, gather: bool) -> tuple[Tensor, int]:
    """``(every rank's rows in rank order, index of this rank's first row)`` with ``gather``, else ``(x, 0)``.

    The gather is :func:`contrastlab.distributed.gather_with_grad` (exact gradients); in one process it
    returns ``(x, 0)`` too, so a loss has one code path: local rows against the gathered candidates.
    """
    return cd.gather_with_grad(x) if gather else (x, 0)


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


def check_finite_loss(loss: Tensor, hint: str, *, gather: bool = False) -> Tensor:
    """Raise ``ValueError`` instead of returning a non-finite loss (never a silent NaN).

    With ``gather`` every rank learns whether any rank's loss is non-finite and all raise together
    (:func:`contrastlab.distributed.agree`), so none waits in the backward's all-reduce alone.
    """

    def check() -> int:
        if not bool(torch.isfinite(loss.detach()).all()):
            raise ValueError(
                f"{hint}: the loss is not finite; the similarities overflowed (use normalize=True, "
                "a larger temperature or smaller inputs)"
            )
        return 0

    cd.agree(check, gather=gather, device=loss.device)
    return loss


def device_of(x: object) -> torch.device | None:
    """The device of ``x`` if it is a tensor (where a collective check's tensors must live), else None."""
    return x.device if isinstance(x, Tensor) else None
