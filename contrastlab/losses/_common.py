"""Pieces shared by every loss: input and option checks, normalisation, temperature handling, output checks."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab._checks import (
    check_bool,
    check_choice,
    check_embeddings,
    check_positive_float,
    check_same_device,
    compute_dtype,
)
from contrastlab.losses import tiled

__all__ = [
    "gather_rows",
    "l2_normalize",
    "TemperatureLike",
    "resolve_inverse_temperature",
    "REDUCTIONS",
    "LossModule",
    "check_finite_loss",
    "check_inputs",
    "check_loss_options",
    "check_negatives",
    "check_pair",
    "check_temperature",
    "resolve_loss_options",
    "scaled_pair",
    "temperature_repr",
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


def check_pair(first_name: str, first: Tensor, second_name: str, second: Tensor) -> tuple[int, int]:
    """Check two row-paired embeddings ``(N, D)`` of the same shape on one device; return ``(N, D)``.

    Raises:
        TypeError, ValueError: from :func:`contrastlab._checks.check_embeddings`, or shapes or devices
            that differ, naming ``second_name``.
    """
    check_embeddings(first_name, first, ndim=2)
    check_embeddings(second_name, second, ndim=2)
    if second.shape != first.shape:
        raise ValueError(
            f"{second_name} must have the same shape as {first_name} {tuple(first.shape)}, got {tuple(second.shape)}"
        )
    check_same_device(**{first_name: first, second_name: second})
    n, d = first.shape
    return n, d


def check_negatives(negatives: object, anchor_name: str, anchor: Tensor) -> None:
    """Check explicit negatives of the checked anchors ``(N, D)``: ``None``, shared ``(M, D)`` or per-anchor ``(N, K, D)``.

    Raises:
        TypeError: not ``None`` or a tensor, or non-floating entries.
        ValueError: another number of dimensions, another D, per-anchor negatives for another N, NaN/Inf,
            another device than the anchors'.
    """
    if negatives is None:
        return
    if not isinstance(negatives, Tensor):
        raise TypeError(f"negatives must be None or a torch.Tensor, got {type(negatives).__name__}")
    if negatives.ndim not in (2, 3):
        raise ValueError(f"negatives must have shape (M, D) or (N, K, D), got {tuple(negatives.shape)}")
    check_embeddings("negatives", negatives, ndim=negatives.ndim)
    n, d = anchor.shape
    if negatives.shape[-1] != d:
        raise ValueError(f"negatives must have embedding dimension D = {d}, got {negatives.shape[-1]}")
    if negatives.ndim == 3 and negatives.shape[0] != n:
        raise ValueError(f"negatives of shape (N, K, D) must have N = {n} rows, got {negatives.shape[0]}")
    check_same_device(**{anchor_name: anchor, "negatives": negatives})


def check_temperature(temperature: object) -> TemperatureLike:
    """A loss module's temperature, checked at construction: a float must be finite and > 0.

    A tensor or a module (``LearnableTemperature``) is returned as given and checked at each call by
    :func:`resolve_inverse_temperature`, because its value changes during training.

    Raises:
        TypeError, ValueError: a float temperature that is not a real number, or not finite and > 0.
    """
    if isinstance(temperature, (nn.Module, Tensor)):
        return temperature
    return check_positive_float("temperature", temperature)


def temperature_repr(temperature: TemperatureLike) -> float | str:
    """A loss module's temperature as its ``repr`` shows it: the float, or ``"learnable"``."""
    return temperature if isinstance(temperature, float) else "learnable"


def check_loss_options(
    temperature: object, normalize: object, reduction: object, gather: object
) -> tuple[TemperatureLike, bool, str, bool]:
    """A loss module's common hyperparameters, checked at construction and returned to be stored.

    The temperature as :func:`check_temperature` checks it.

    Returns:
        ``(temperature, normalize, reduction, gather)``.

    Raises:
        TypeError: a non-real temperature, non-bool ``normalize`` or ``gather``.
        ValueError: a float temperature that is not finite and > 0, an unknown ``reduction``.
    """
    return (
        check_temperature(temperature),
        check_bool("normalize", normalize),
        check_choice("reduction", reduction, REDUCTIONS),
        check_bool("gather", gather),
    )


def resolve_loss_options(
    temperature: TemperatureLike, reduction: object, *inputs: Tensor, normalize: object = True
) -> tuple[torch.dtype, Tensor | float]:
    """Check a loss call's ``reduction`` and ``normalize``; return its compute dtype and 1/τ in that dtype.

    Call it inside the loss's collective check (:func:`contrastlab.distributed.agree`), after the
    inputs are validated, so that a bad option on any rank raises on every rank.

    Args:
        temperature: τ as the loss takes it (see :data:`TemperatureLike`).
        reduction: one of :data:`REDUCTIONS`.
        inputs: the embeddings, the first one's device being the loss's (float64 if any is float64,
            else float32: :func:`contrastlab._checks.compute_dtype`).
        normalize: the loss's ``normalize`` flag (a loss without one leaves the default).

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


def check_inputs(
    first: Tensor,
    second: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: TemperatureLike,
    reduction: object,
    normalize: object = True,
    names: tuple[str, str] = ("anchor", "positive"),
) -> tuple[int, torch.dtype, Tensor | float]:
    """This rank's checks of a pair loss's inputs and common options; return ``(N, dtype, inv_t)``.

    In order: the row-paired embeddings ``(N, D)`` named ``names`` (:func:`check_pair`), the explicit
    negatives ``None``, ``(M, D)`` or ``(N, K, D)`` (:func:`check_negatives`), then ``reduction``,
    ``normalize`` and the temperature (:func:`resolve_loss_options`, over every input). Call it inside
    the loss's collective check (:func:`contrastlab.distributed.agree`).

    Returns:
        ``(N, dtype, inv_t)``: this rank's number of rows, the compute dtype and 1/τ in it.

    Raises:
        TypeError, ValueError: as the three checks, naming the argument.
    """
    n, _ = check_pair(names[0], first, names[1], second)
    check_negatives(negatives, names[0], first)
    inputs = (first, second) if negatives is None else (first, second, negatives)
    dtype, inv_t = resolve_loss_options(temperature, reduction, *inputs, normalize=normalize)
    return n, dtype, inv_t


def scaled_pair(
    anchor: Tensor, positive: Tensor, dtype: torch.dtype, inv_t: Tensor | float, normalize: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, q, k)``: the anchors in ``dtype``, the queries q = a/(‖a‖τ) and the keys k = p/‖p‖.

    Normalisation and the 1/τ scaling are one ``(N, D)`` pass
    (:func:`contrastlab.losses.tiled.normalize_scale`); 1/τ stays in the autograd graph here (O(N·D)),
    so a learnable temperature gets its gradient on every path. Without ``normalize``: q = a/τ, k = p.
    Shapes: anchor, positive ``(N, D)``; each result ``(N, D)``.
    """
    a = anchor.to(dtype)
    q = tiled.normalize_scale(a, inv_t) if normalize else a * inv_t
    k = positive.to(dtype)
    if normalize:
        k = tiled.normalize_scale(k)
    return a, q, k


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


class LossModule(nn.Module):
    """A loss's thin module: ``__init__`` checks the hyperparameters, ``forward`` passes them to the function.

    A subclass's ``__init__`` stores every argument it takes as the attribute of the same name (the
    common four through this class's ``__init__``); :meth:`hyperparameters` reads them back by the names
    of that signature, so ``forward`` is the loss function of its inputs and ``**self.hyperparameters()``.
    A ``LearnableTemperature`` given as ``temperature`` is a submodule, trained with the model's parameters
    when the loss's are given to the optimiser.
    """

    _arguments: ClassVar[tuple[str, ...]] = ()
    """The names of the arguments of the subclass's ``__init__``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._arguments = tuple(inspect.signature(cls).parameters)

    def __init__(self, temperature: object, normalize: object, reduction: object, gather: object = False) -> None:
        super().__init__()
        self.temperature, self.normalize, self.reduction, self.gather = check_loss_options(
            temperature, normalize, reduction, gather
        )

    def hyperparameters(self) -> dict[str, Any]:
        """``{name: value}`` of every argument of the subclass's ``__init__``, as stored at construction."""
        return {name: getattr(self, name) for name in self._arguments}

    def extra_repr(self) -> str:
        """The hyperparameters shown in ``repr`` (a module temperature as ``learnable``)."""
        shown = {**self.hyperparameters(), "temperature": temperature_repr(self.temperature)}
        return ", ".join(f"{k}={v}" if k == "temperature" else f"{k}={v!r}" for k, v in shown.items())


def device_of(x: object) -> torch.device | None:
    """The device of ``x`` if it is a tensor (where a collective check's tensors must live), else None."""
    return x.device if isinstance(x, Tensor) else None
