"""Pieces shared by every loss: normalisation, temperature handling, reduction, output checks."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab._checks import check_bool, check_choice, check_positive_float, compute_dtype

__all__ = [
    "gather_rows",
    "l2_normalize",
    "TemperatureLike",
    "resolve_inverse_temperature",
    "REDUCTIONS",
    "check_finite_loss",
    "check_loss_options",
    "resolve_loss_options",
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


def check_loss_options(
    temperature: object, normalize: object, reduction: object, gather: object
) -> tuple[TemperatureLike, bool, str, bool]:
    """A loss module's common hyperparameters, checked at construction and returned to be stored.

    A float temperature must be finite and > 0 (returned as a float); a tensor or a module
    (``LearnableTemperature``) is returned as given and checked at each call by
    :func:`resolve_inverse_temperature`, because its value changes during training.

    Returns:
        ``(temperature, normalize, reduction, gather)``.

    Raises:
        TypeError: a non-real temperature, non-bool ``normalize`` or ``gather``.
        ValueError: a float temperature that is not finite and > 0, an unknown ``reduction``.
    """
    if not isinstance(temperature, (nn.Module, Tensor)):
        temperature = check_positive_float("temperature", temperature)
    return (
        temperature,
        check_bool("normalize", normalize),
        check_choice("reduction", reduction, REDUCTIONS),
        check_bool("gather", gather),
    )


def resolve_loss_options(
    temperature: TemperatureLike, normalize: object, reduction: object, *inputs: Tensor
) -> tuple[torch.dtype, Tensor | float]:
    """Check a loss call's ``reduction`` and ``normalize``; return its compute dtype and 1/τ in that dtype.

    Call it inside the loss's collective check (:func:`contrastlab.distributed.agree`), after the
    inputs are validated, so that a bad option on any rank raises on every rank.

    Args:
        temperature: τ as the loss takes it (see :data:`TemperatureLike`).
        normalize: the loss's ``normalize`` flag.
        reduction: one of :data:`REDUCTIONS`.
        inputs: the embeddings, the first one's device being the loss's (float64 if any is float64,
            else float32: :func:`contrastlab._checks.compute_dtype`).

    Returns:
        ``(dtype, inv_t)``: the compute dtype and :func:`resolve_inverse_temperature`'s 1/τ.

    Raises:
        TypeError: non-bool ``normalize``, a temperature of an unsupported type.
        ValueError: unknown ``reduction``, τ ≤ 0 or non-finite, 1/τ overflowing the dtype.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_bool("normalize", normalize)
    dtype = compute_dtype(*inputs)
    return dtype, resolve_inverse_temperature(temperature, dtype, inputs[0].device)


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
