"""Matryoshka representation learning: any loss of the family on nested prefixes of the embedding.

Kusupati et al. 2022, "Matryoshka Representation Learning", NeurIPS 2022 (arXiv 2205.13147), eq. 1: for
widths d_1 < d_2 < … < d_K and weights w_k ≥ 0 the loss is

    L_MRL = Σ_k w_k · L(e[..., :d_k])

where L is the inner loss and e[..., :d_k] keeps the first d_k coordinates of every embedding it is
given, so that after training the first d_k coordinates alone are a usable embedding. sentence-transformers'
``MatryoshkaLoss`` is this sum (its default weights are 1 each).

Every loss of :data:`contrastlab.losses.LOSSES` works unchanged on a prefix, because each prefix is an
ordinary ``(…, d_k)`` embedding:

* the losses with a ``normalize`` flag (``info_nce``/``dcl``, ``nt_xent``, ``supcon``, ``siglip``,
  ``debiased``, ``hard_negative``, ``support_corrected``) L2-normalise their rows themselves when it is
  True (the default), so each prefix is renormalised to the unit sphere of R^{d_k} — the cosine
  similarity of the truncated embeddings, which is what a search over them computes. With
  ``normalize=False`` they take raw dot products of the prefixes, as they would of the full rows;
* ``weince`` always normalises its rows (its Weibit logit reads 1 − cos), so each prefix is renormalised.

Nothing here renormalises a second time: the inner loss decides, as it does at full width.

Which arguments are truncated: every floating-point positional argument (views, shared ``(M, D)`` or
per-anchor ``(N, K, D)`` negatives) along its last dimension. Integer positional arguments (``supcon``'s
labels) and everything the inner loss gets by keyword (``positive_mask``, ``weights``, a temperature) pass
through unchanged; bind them with ``functools.partial`` (or call :class:`MatryoshkaLoss` with keywords).

Exactness: the sum is computed from the same embeddings at every width, so it depends on the model only
through them. Gradient caching (:mod:`contrastlab.train.loop.grad_cache`) therefore stays exact, and so does
``gather=True``: each width's share is the inner loss's own share of the global loss, and a weighted sum
of shares is the share of the weighted sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from torch import Tensor, nn

from contrastlab.losses.weince import WEINCELoss

__all__ = ["matryoshka", "MatryoshkaLoss", "check_dims", "check_weights"]


def check_dims(dims: object, width: int | None = None) -> tuple[int, ...]:
    """Validate Matryoshka widths: a non-empty, strictly increasing sequence of ints ≥ 1, the last ≤ ``width``.

    Args:
        dims: the widths d_1 < … < d_K.
        width: the embedding width D they must fit in (None: not checked).

    Returns:
        The widths as a tuple.

    Raises:
        TypeError: ``dims`` is not a sequence of ints.
        ValueError: empty, a width < 1, not strictly increasing, or a width larger than ``width``.
    """
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"dims must be a sequence of ints, got {type(dims).__name__}")
    out = tuple(dims)
    if not out:
        raise ValueError("dims must hold at least one width")
    for d in out:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"dims must be ints, got {type(d).__name__} {d!r}")
        if d < 1:
            raise ValueError(f"dims must be >= 1, got {list(out)}")
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"dims must be strictly increasing, got {list(out)}")
    if width is not None and out[-1] > width:
        raise ValueError(f"dims: width {out[-1]} is larger than the embedding width D = {width}")
    return out


def check_weights(weights: object, n: int) -> tuple[float, ...]:
    """Validate one weight per width: finite reals ≥ 0, not all 0; ``None`` gives 1.0 each.

    Raises:
        TypeError: ``weights`` is not a sequence of real numbers.
        ValueError: the wrong length, a negative or non-finite weight, or every weight 0.
    """
    if weights is None:
        return (1.0,) * n
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"weights must be None or a sequence of real numbers, got {type(weights).__name__}")
    if len(weights) != n:
        raise ValueError(f"weights must hold one weight per width ({n}), got {len(weights)}")
    out: list[float] = []
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise TypeError(f"weights must be real numbers, got {type(w).__name__} {w!r}")
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"weights must be finite and >= 0, got {list(weights)}")
        out.append(float(w))
    if not any(out):
        raise ValueError("weights must not all be 0 (the loss would be a constant)")
    return tuple(out)


def _width(embeddings: tuple[Any, ...]) -> int:
    """The common last dimension D of the floating-point positional arguments.

    Raises:
        ValueError: no floating-point tensor among them, or two of different widths.
    """
    widths = [(i, x) for i, x in enumerate(embeddings) if isinstance(x, Tensor) and x.is_floating_point()]
    if not widths or any(x.ndim == 0 for _, x in widths):
        raise ValueError("embeddings: the loss's positional arguments hold no floating-point (…, D) tensor to truncate")
    i0, d0 = widths[0][0], widths[0][1].shape[-1]
    for i, x in widths[1:]:
        if x.shape[-1] != d0:
            raise ValueError(
                f"embeddings: argument {i} has width {x.shape[-1]} but argument {i0} has {d0}; every embedding needs the same D"
            )
    return int(d0)


def matryoshka(
    loss: Callable[..., Any], *embeddings: Any, dims: Sequence[int], weights: Sequence[float] | None = None
) -> Tensor:
    """Σ_k w_k · ``loss`` of the first d_k coordinates of every embedding (Kusupati et al. 2022, eq. 1).

    Args:
        loss: the inner loss, called as ``loss(*truncated)`` once per width; a function of
            :data:`~contrastlab.losses.LOSSES` (keywords bound with ``functools.partial``) or a loss module.
            It must return a tensor (not ``weince``'s ``(loss, stats)``).
        embeddings: the inner loss's positional arguments. Floating-point tensors (views ``(N, D)``,
            negatives ``(M, D)`` or ``(N, K, D)``) are truncated to ``[..., :d_k]``; others (integer
            labels) are passed as they are. Every floating-point one must have the same width D.
        dims: strictly increasing widths d_1 < … < d_K, each in [1, D] (D itself for the full embedding).
        weights: w_k ≥ 0, one per width, not all 0 (default 1 each, as sentence-transformers).

    Returns:
        The weighted sum, of the inner loss's shape (a scalar, or per-row losses for ``reduction="none"``)
        and dtype.

    Raises:
        TypeError, ValueError: bad ``dims`` or ``weights`` (see :func:`check_dims`, :func:`check_weights`),
            embeddings of different widths, an inner loss that does not return a tensor, or any error of
            the inner loss (raised by its first call, at the smallest width).

    Examples:
        >>> import torch
        >>> from functools import partial
        >>> from contrastlab.losses import info_nce
        >>> a, p = torch.randn(8, 64), torch.randn(8, 64)
        >>> loss = matryoshka(partial(info_nce, temperature=0.05), a, p, dims=(16, 32, 64))
        >>> bool(torch.isclose(loss, sum(info_nce(a[:, :d], p[:, :d], temperature=0.05) for d in (16, 32, 64))))
        True
    """
    if not callable(loss):
        raise TypeError(f"loss must be callable, got {type(loss).__name__}")
    width = _width(embeddings)
    ds = check_dims(dims, width)
    ws = check_weights(weights, len(ds))
    total: Tensor | None = None
    for d, w in zip(ds, ws, strict=True):
        if w == 0:
            continue
        args = [x[..., :d] if isinstance(x, Tensor) and x.is_floating_point() else x for x in embeddings]
        out = loss(*args)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"loss must return a tensor, got {type(out).__name__} (weince with return_stats=True returns a tuple)"
            )
        if total is not None and out.shape != total.shape:
            raise ValueError(f"loss returns shape {tuple(out.shape)} at width {d}, {tuple(total.shape)} before")
        term = out if w == 1.0 else w * out
        total = term if total is None else total + term
    assert total is not None  # check_weights refuses all-zero weights
    return total


def _stateful(loss: object) -> bool:
    """Whether ``loss`` is a WEINCE module whose global β_t buffer would be updated once per width."""
    return isinstance(loss, WEINCELoss) and loss.options.needs_global_beta


class MatryoshkaLoss(nn.Module):
    """Module form of :func:`matryoshka`: a loss (function or module) on nested prefixes of the embedding.

    A loss module is registered as a submodule, so a ``LearnableTemperature`` (or SigLIP's learnable
    temperature and bias) inside it is trained with the model.

    Args:
        loss: the inner loss, e.g. ``InfoNCELoss(temperature=0.05)`` or ``partial(supcon, temperature=0.1)``.
        dims: strictly increasing widths d_1 < … < d_K (checked against D at each call).
        weights: one weight ≥ 0 per width (default 1 each).

    Raises:
        TypeError, ValueError: bad ``dims`` or ``weights``; ``loss`` not callable, or a ``WEINCELoss`` with a
            global β_t state (``beta_mode="global_ema"`` or ``aux_top_m > 0``), whose buffer the K widths
            would each update in one step (wrap :func:`~contrastlab.losses.weince` with an explicit
            ``beta_ema`` instead).

    Examples:
        >>> import torch
        >>> from contrastlab.losses import InfoNCELoss
        >>> loss_fn = MatryoshkaLoss(InfoNCELoss(temperature=0.05), dims=(32, 64, 128), weights=(1.0, 1.0, 2.0))
        >>> loss_fn(torch.randn(4, 128), torch.randn(4, 128)).ndim
        0
    """

    def __init__(self, loss: Callable[..., Any], dims: Sequence[int], weights: Sequence[float] | None = None) -> None:
        super().__init__()
        if not callable(loss):
            raise TypeError(f"loss must be callable, got {type(loss).__name__}")
        if _stateful(loss):
            raise ValueError(
                "loss: a WEINCELoss with a global beta_t state (beta_mode='global_ema' or aux_top_m > 0) would "
                "update it once per width; wrap the weince function with an explicit beta_ema instead"
            )
        self.loss = loss
        self.dims = check_dims(dims)
        self.weights = check_weights(weights, len(self.dims))

    def forward(self, *embeddings: Any, **kwargs: Any) -> Tensor:
        """The weighted loss over the widths; keywords go to the inner loss unchanged (see :func:`matryoshka`)."""
        fn = partial(self.loss, **kwargs) if kwargs else self.loss
        return matryoshka(fn, *embeddings, dims=self.dims, weights=self.weights)

    def extra_repr(self) -> str:
        """The widths and weights shown in ``repr``."""
        return f"dims={list(self.dims)}, weights={list(self.weights)}"
