"""Argument validation shared by every public function.

Every check raises ``ValueError`` or ``TypeError`` whose message starts with the argument's name, so
that a user sees *which* input is wrong, never a silent NaN further down.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "check_embeddings",
    "all_finite",
    "check_positive_float",
    "check_int",
    "check_real",
    "check_same_device",
    "check_choice",
    "check_bool",
    "check_labels",
    "compute_dtype",
]


def check_embeddings(name: str, x: object, *, ndim: int, allow_empty: bool = False) -> Tensor:
    """Validate an embedding tensor and return it.

    Args:
        name: the argument's name, used in error messages.
        x: the value to check.
        ndim: the required number of dimensions (2 for ``(N, D)``, 3 for ``(N, K, D)``).
        allow_empty: whether a zero-sized leading dimension is acceptable.

    Returns:
        ``x`` unchanged.

    Raises:
        TypeError: ``x`` is not a tensor, or is not floating point.
        ValueError: wrong number of dimensions, an empty dimension, or a NaN/Inf entry.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim != ndim:
        shape = "(N, D)" if ndim == 2 else "(N, K, D)" if ndim == 3 else f"{ndim} dims"
        raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    if x.shape[-1] == 0:
        raise ValueError(f"{name} has embedding dimension D = 0; D must be at least 1")
    if not allow_empty and any(s == 0 for s in x.shape):
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); every dimension must be at least 1")
    if not all_finite(x):
        raise ValueError(f"{name} contains NaN or Inf entries")
    return x


def all_finite(x: Tensor) -> bool:
    """Whether every entry of ``x`` is finite (True for an empty tensor).

    One read of ``x``: the smallest and largest entries are finite exactly when all are, since
    ``aminmax`` propagates NaN (``isfinite(x).all()`` makes four passes and a boolean copy).
    """
    if x.numel() == 0:
        return True
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def check_positive_float(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Validate a finite real number > 0 (or >= 0 with ``allow_zero``) and return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {v}")
    return v


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """Validate an integer (a Python or numpy int, not a bool) ≥ ``minimum`` and return it as ``int``.

    Anything that is not an integer, the string ``"3"`` included, is a ``TypeError``; an integer
    below ``minimum`` is a ``ValueError``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_real(name: str, value: object) -> float:
    """Validate a finite real number (int or float, numpy's included, not a bool) and return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Validate that ``value`` is one of ``choices`` and return it."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_bool(name: str, value: object) -> bool:
    """Validate a flag (a real ``bool``, not a truthy object) and return it."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_same_device(**tensors: Tensor | None) -> None:
    """Raise ``ValueError`` naming the first tensor whose device differs from the first one's."""
    items = [(k, t) for k, t in tensors.items() if t is not None]
    if not items:
        return
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}; move them to one device")


def check_labels(name: str, labels: object, n: int) -> Tensor:
    """Validate a 1-D integer label tensor of length ``n`` and return it."""
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(labels).__name__}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got dtype {labels.dtype}")
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (N,), got {tuple(labels.shape)}")
    if labels.shape[0] != n:
        raise ValueError(f"{name} has length {labels.shape[0]} but the embeddings have N = {n} rows")
    return labels


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """The dtype a loss computes in: float64 if any input is float64, else float32.

    Half-precision inputs (fp16, bf16) are upcast, so a loss is never computed in half precision.
    """
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
