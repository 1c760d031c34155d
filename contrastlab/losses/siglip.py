"""SigLIP: the pairwise sigmoid loss, streamed over blocks of rows with an exact gradient.

Zhai, Mustafa, Kolesnikov and Beyer, "Sigmoid Loss for Language Image Pre-Training", ICCV 2023,
arXiv 2303.15343, eq. (1) and Algorithm 1. Every (anchor i, candidate j) pair is an independent binary
classification, "is j the positive of i?", with logit ``L_ij = t ⟨x̂_i, ŷ_j⟩ + b``:

    loss = −(1/|B|) Σ_i Σ_j log σ(z_ij L_ij),        z_ij = +1 if j = i, else −1,

``t = exp(t')`` the inverse temperature and ``b`` a bias; the paper initialises ``t' = log 10`` and
``b = −10`` (§3.2 and Algorithm 1), so that the N² − N negative pairs, which dominate the sum, start
with a small loss. No softmax couples the rows, so the loss is a plain sum over the N × N pairs.

Memory is linear in N: the rows are visited in blocks (about 16 MiB of logits each); each block's
logits give its loss and, while they are in cache, its gradient ``G = σ(L) − I`` (made ahead for an
upstream gradient that is the same for every row, as a mean or a sum sends; recomputed exactly
otherwise). No N × N tensor is allocated.

With ``gather=True`` each rank contrasts its own anchors with the candidates of every rank
(:func:`contrastlab.distributed.gather_with_grad`) and returns its share of the global loss: the mean
of the shares over ranks is the single-process loss of the global batch, and the gradients are exact.
In one process the gather is the identity, so there is one path.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from contrastlab import distributed
from contrastlab._checks import check_bool, check_positive_float
from contrastlab.losses import tiled
from contrastlab.losses._common import (
    TemperatureLike,
    check_finite_loss,
    check_inputs,
    check_loss_options,
    device_of,
    gather_rows,
    scaled_pair,
)
from contrastlab.losses._docs import shared_docs
from contrastlab.losses.compiled_choice import check_compiled, measured_choice
from contrastlab.losses.siglip_compiled import compiled_blocks
from contrastlab.losses.temperature import LearnableTemperature

__all__ = ["SigLIPLoss", "siglip"]

#: Logits per block of rows when ``chunk_size`` is None: 2^24 bytes (16 MiB), a block that stays in cache
#: while its loss and gradient are taken.
_BLOCK_BYTES = 1 << 24


def _block_rows(n_cols: int, itemsize: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return chunk_size
    return max(1, _BLOCK_BYTES // (n_cols * itemsize))


#: The softplus row sums combine a block's columns in this many slices (:func:`_softplus_row_sums`): one
#: ``log1p`` per 16 logits, and a relative rounding error of at most about 3 · 16 units in the last place.
_SLICES = 16


def _softplus_row_sums(y: Tensor, acc: Tensor) -> Tensor:
    """``Σ_j softplus(L_ij) = Σ_j log(1 + 1/y_ij)`` per row of ``y = exp(−L)`` (r, M), one ``log1p`` per 16.

    ``log1p`` costs about three times an ``exp`` per element on the benchmark CPU, so the row sum is taken
    as a sum of logarithms of products: the M columns are cut into ``_SLICES`` slices of
    c = ⌈M / _SLICES⌉ columns, and the first c columns of ``acc`` (r, ≥ 2c), a reused buffer, accumulate
    ``s = Π_slices (1 + x) − 1`` with ``x = eᴸ = 1/y``, by ``s ← s + (1 + s)/y`` (the other c columns
    hold ``1 + s``). Every term is ≥ 0, so nothing cancels: each step adds at most three roundings,
    ``s`` keeps a relative error ≤ 3 · _SLICES · u (u = 2⁻²⁴ in float32), and ``log1p`` (condition number
    ≤ 1 on s ≥ 0) passes it on. Forming ``Π (1 + x)`` instead would lose every ``x`` below float32's
    epsilon: SigLIP's negatives, ``x ≈ e⁻¹⁰``, would be off by about 10⁻³.

    ``y = inf`` (``L < −88``) adds its exact limit 0. The result is not finite where a product
    overflows (a logit above 88, or 16 logits whose softplus values sum past 88); the caller then
    recomputes those rows another way.
    """
    m = y.shape[1]
    c = -(-m // _SLICES)
    s, one_s = acc[:, : min(c, m)], acc[:, c : c + min(c, m)]
    torch.reciprocal(y[:, :c], out=s)
    for j in range(c, m, c):
        yj = y[:, j : j + c]  # (r, ≤ c)
        w = yj.shape[1]
        torch.add(s[:, :w], 1.0, out=one_s[:, :w])
        s[:, :w].addcdiv_(one_s[:, :w], yj)  # (1 + s)(1 + x) − 1
    return torch.log1p(s).sum(dim=1)


def _exact_block(lg: Tensor, diag_col: int, grad: bool) -> Tensor:
    """Row losses ``Σ_j softplus(L_ij) − L_i,pos`` of a logit block, leaving ``σ(L) − I`` in ``lg`` if ``grad``.

    The fallback of :func:`_forward` for blocks whose products overflow: ``softplus = logaddexp(L, 0)``
    into a fresh block-sized buffer, and ``σ`` in place; exact for any finite logit.
    """
    loss = torch.logaddexp(lg, lg.new_zeros(())).sum(dim=1) - lg.diagonal(diag_col)
    if grad:
        lg.sigmoid_().diagonal(diag_col).sub_(1.0)
    return loss


def _eager_block(
    neg: Tensor, pos: Tensor, q: Tensor, k: Tensor, b: Tensor, diag_col: int, grad: bool, loss: Tensor, acc: Tensor
) -> None:
    """The eager block pass of :func:`_forward`: ``loss`` ``(r,)`` from ``neg = −L`` ``(r, M)``.

    ``σ(L) − I`` is left in ``neg``'s buffer if ``grad``; ``q`` holds the block's rows (for the exact
    recomputation of an overflowing block) and ``acc`` is :func:`_softplus_row_sums`' buffer.
    """
    y = neg.exp_()
    row = _softplus_row_sums(y, acc)
    if bool(torch.isfinite(row).all()):
        loss.copy_(row - pos)
        if grad:
            y.add_(1.0).reciprocal_()  # σ(L) = 1 / (1 + e⁻ᴸ), in place
            y.diagonal(diag_col).copy_(torch.sigmoid(-pos).neg_())  # σ(L_ii) − 1
    else:
        lg = torch.addmm(b, q, k.T, out=neg)
        loss.copy_(_exact_block(lg, diag_col, grad))


def _forward(
    q: Tensor,
    k: Tensor,
    bias: Tensor,
    offset: int,
    rows: int,
    weight: Tensor | None,
    grads: tuple[bool, bool, bool],
    compiled: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """Stream the row blocks: per-row losses, and the gradients for the upstream row weights ``weight``.

    Per block: one GEMM writes the negated logits ``−L = −b − Q Kᵀ`` (``addmm`` of the scalar ``−b`` with
    ``alpha = −1``: the sign and the bias are free in the GEMM; every GEMM has the D columns of the data,
    as an extra (D+1)-th column for b would make two of the three GEMMs about a fifth slower on the
    benchmark machine); one ``exp`` turns them in place into ``y = e⁻ᴸ``; the softplus row sums
    ``Σ_j log(1 + 1/y_ij)`` are read off ``y`` (:func:`_softplus_row_sums`); and ``σ(L) = 1 / (1 + y)``
    is made in place by two cheap passes (``y = inf`` gives ``σ = 0``, the right limit). The positives'
    entries are set to ``σ(L_ii) − 1 = −σ(−L_ii)`` from the saved diagonal, without the cancellation of
    ``σ − 1``. The gradient block then feeds the two backward GEMMs while in cache, and ``∂b = Σ G`` is
    summed on it. A block whose softplus products overflow (logits above 88) is recomputed by
    :func:`_exact_block`.

    ``weight`` None means every row has weight 1. ``grads`` says which of (q, k, bias) need a gradient.
    ``compiled`` makes each block's softplus row sums, ``σ(L)`` (in the block buffer) and the row sums
    of ``σ(L)`` (for ``∂b``) with the compiled functions of :mod:`contrastlab.losses.siglip_compiled`
    instead of the eager passes.
    """
    n, m = q.shape[0], k.shape[0]
    b = bias.detach()
    loss = q.new_empty(n)
    block = min(rows, n)
    buf = q.new_empty(block, m)  # reused by every block
    acc = q.new_empty(block, 0 if compiled else 2 * -(-m // _SLICES))
    dq = torch.empty_like(q) if grads[0] else None
    dk = torch.zeros_like(k) if grads[1] else None
    db = q.new_zeros(()) if grads[2] else None
    grad = any(grads)
    loss_block, loss_grad_block = compiled_blocks() if compiled else (None, None)
    for i0 in range(0, n, rows):
        i1 = min(i0 + rows, n)
        neg = torch.addmm(-b, q[i0:i1], k.T, alpha=-1.0, out=buf[: i1 - i0])  # (r, M): −L = −b − Q Kᵀ
        pos = neg.diagonal(offset + i0).neg()  # (r,): the positives' logits L_i,offset+i
        g = buf[: i1 - i0]
        g_rows = None  # (r,): the row sums of G, when the compiled pass made them
        if loss_block is not None and loss_grad_block is not None:  # the compiled pass: exact for finite L
            if grad:
                row, sigma_rows = loss_grad_block(neg)  # the buffer now holds σ(L)
                g.diagonal(offset + i0).copy_(torch.sigmoid(-pos).neg_())  # σ(L_ii) − 1
                g_rows = sigma_rows - 1.0
            else:
                row = loss_block(neg)
            loss[i0:i1] = row - pos
        else:
            _eager_block(neg, pos, q[i0:i1], k, b, offset + i0, grad, loss[i0:i1], acc[: i1 - i0])
        if not grad:
            continue
        # G = ∂ℓ/∂L = σ(L) − I, (r, M)
        if weight is not None:
            g.mul_(weight[i0:i1, None])
            g_rows = None if g_rows is None else g_rows * weight[i0:i1]
        if dq is not None:
            torch.mm(g, k, out=dq[i0:i1])
        if dk is not None:
            dk.addmm_(g.T, q[i0:i1])
        if db is not None:
            db += g.sum() if g_rows is None else g_rows.sum()
    return loss, dq, dk, db


def _compiled_is_faster(q: Tensor, k: Tensor, bias: Tensor, offset: int, rows: int, grad: bool) -> bool:
    """``compiled="auto"``: whether the compiled block pass beat the eager one on this loss's first block.

    Measured once per (device, dtype, block rows, power of two of M, grad) and process
    (:func:`contrastlab.losses.compiled_choice.measured_choice`).
    """
    r, m = min(rows, q.shape[0]), k.shape[0]
    key = ("siglip", q.device.type, q.dtype, r, max(1, m - 1).bit_length(), grad)

    def make() -> tuple[Any, Any]:
        b = bias.detach()
        qr, kd = q[:r].detach(), k.detach()
        block = torch.addmm(-b, qr, kd.T, alpha=-1.0)  # (r, M): the first block's −L
        work, row = torch.empty_like(block), q.new_empty(r)
        pos = block.diagonal(offset).neg()
        acc = q.new_empty(r, 2 * -(-m // _SLICES))
        loss_block, loss_grad_block = compiled_blocks()

        def eager() -> None:
            _eager_block(work.copy_(block), pos, qr, kd, b, offset, grad, row, acc)

        def compiled() -> None:
            (loss_grad_block if grad else loss_block)(work.copy_(block))

        return eager, compiled

    return measured_choice(key, make, device=q.device)


class _SigmoidPairs(torch.autograd.Function):
    """Per-row SigLIP losses of ``L = Q Kᵀ + b`` with the positive of row i at column ``offset + i``.

    The forward also makes the gradient for an all-ones upstream gradient (``∂Q = G K``, ``∂K = Gᵀ Q``,
    ``∂b = Σ G``); the backward scales it when every row gets the same upstream gradient and otherwise
    streams the blocks again with the rows weighted (exact either way).
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, bias: Tensor, offset: int, rows: int, compiled: bool) -> Tensor:
        grads = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        loss, dq, dk, db = _forward(q, k, bias, offset, rows, None, grads, compiled)
        ctx.args = (offset, rows, grads, compiled)
        ctx.save_for_backward(q, k, bias, dq, dk, db)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None, None, None, None]:
        q, k, bias, dq, dk, db = ctx.saved_tensors
        offset, rows, grads, compiled = ctx.args
        if bool((grad == grad[0]).all()):  # the same for every row: scale the gradient made ahead
            c = grad[0]
            return (
                dq * c if dq is not None else None,
                dk * c if dk is not None else None,
                db * c if db is not None else None,
                None,
                None,
                None,
            )
        _, dq, dk, db = _forward(q, k, bias, offset, rows, grad, grads, compiled)
        return dq, dk, db, None, None, None


def _check_bias(bias: object, dtype: torch.dtype, device: torch.device) -> Tensor:
    if isinstance(bias, Tensor):
        if bias.numel() != 1:
            raise ValueError(f"bias must be a scalar, got a tensor of shape {tuple(bias.shape)}")
        if not bias.is_floating_point():
            raise TypeError(f"bias must be a floating-point tensor, got dtype {bias.dtype}")
        if not bool(torch.isfinite(bias.detach()).all()):
            raise ValueError(f"bias must be finite, got {float(bias.detach())}")
        return bias.reshape(()).to(dtype=dtype, device=device)
    if isinstance(bias, bool) or not isinstance(bias, (int, float)):
        raise TypeError(f"bias must be a real number or a 0-d tensor, got {type(bias).__name__}")
    if not math.isfinite(bias):
        raise ValueError(f"bias must be finite, got {bias}")
    return torch.tensor(float(bias), dtype=dtype, device=device)


@shared_docs
def siglip(
    anchor: Tensor,
    positive: Tensor,
    *,
    temperature: TemperatureLike = 0.1,
    bias: float | Tensor = -10.0,
    normalize: bool = True,
    reduction: str = "mean",
    chunk_size: int | None = None,
    gather: bool = False,
    compiled: bool | str = False,
) -> Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023, arXiv 2303.15343, eq. 1 and Algorithm 1).

    ``ℓ_i = −Σ_j log σ(z_ij L_ij)`` with ``L_ij = ⟨x̂_i, ŷ_j⟩/τ + b`` over every candidate ``j`` (the
    positives of all anchors), ``z_ii = +1`` and ``z_ij = −1`` for ``j ≠ i``. The mean is
    ``Σ_i ℓ_i / N``, the paper's normalisation by the batch size (not by the N² pairs).

    Args:
        anchor: {anchor} The paper's images.
        positive: {positive} The paper's texts.
        temperature: τ > 0, the paper's ``1/t = exp(−t')``: a float, a 0-d tensor, or a module returning
            one (:class:`~contrastlab.losses.LearnableTemperature`). Default 0.1, the paper's
            initial ``t = 10``.
        bias: the logit bias ``b``: a float or a 0-d tensor (learnable). Default −10, the paper's
            initial value.
        normalize: {normalize} The paper normalises.
        reduction: {reductions} (per-anchor losses ``ℓ_i`` of shape ``(N,)``).
        chunk_size: rows per block of the streamed pass; ``None`` chooses blocks of about 16 MiB of
            logits. Any value ≥ 1 gives the same numbers; memory is O((N + chunk_size)·D + chunk_size·N).
        gather: under torch.distributed, contrast this rank's anchors with the positives of every rank
            (exact gradients). {gather_share}
        compiled: ``True`` makes each block's element-wise pass (the softplus and σ row sums, σ(L))
            with a function compiled by ``torch.compile`` (:mod:`contrastlab.losses.siglip_compiled`)
            instead of the eager passes, the reference and the default (``False``); {compiled_auto}

    Returns:
        The loss, a float32 scalar (float64 if an input is float64), or ``(N,)`` for ``reduction="none"``.
        Half-precision inputs are computed in float32.

    Raises:
        TypeError: non-tensor or non-floating inputs, a bias that is not a real number, a non-bool flag.
        ValueError: shape mismatch, empty inputs, NaN/Inf, τ ≤ 0, a non-finite bias, an unknown
            reduction, inputs on different devices, ``chunk_size`` < 1, or logits that overflow with
            ``normalize=False``.

    Examples:
        >>> a, p = torch.randn(8, 16), torch.randn(8, 16)
        >>> siglip(a, p).shape
        torch.Size([])
        >>> siglip(a, p, temperature=0.5, bias=0.0, reduction="none").shape
        torch.Size([8])
    """
    check_bool("gather", gather)
    checked: dict[str, Any] = {}

    def check() -> int:
        n_local, checked["dtype"], checked["inv_t"] = check_inputs(
            anchor, positive, temperature=temperature, reduction=reduction, normalize=normalize
        )
        checked["compiled"] = check_compiled(compiled)
        checked["chunk_size"] = tiled.check_chunk_size(chunk_size)
        checked["bias"] = _check_bias(bias, checked["dtype"], anchor.device)
        return n_local

    # every rank checks its input and agrees before any collective: one rank's bad input raises on all
    distributed.agree(check, gather=gather, device=device_of(anchor))
    chunk_size, dtype, inv_t, b = checked["chunk_size"], checked["dtype"], checked["inv_t"], checked["bias"]

    _, q, k = scaled_pair(anchor, positive, dtype, inv_t, normalize)  # q = t·x̂, k = ŷ
    k_all, offset = gather_rows(k, gather)  # (N_global, D)
    rows = _block_rows(k_all.shape[0], q.element_size(), chunk_size)
    grad = torch.is_grad_enabled() and (q.requires_grad or k_all.requires_grad or b.requires_grad)
    use_compiled = checked["compiled"]
    if use_compiled == "auto":
        use_compiled = _compiled_is_faster(q, k_all, b, offset, rows, grad)
    if grad:
        per_row = _SigmoidPairs.apply(q, k_all, b, offset, rows, use_compiled)
    else:
        per_row = _forward(q, k_all, b, offset, rows, None, (False, False, False), use_compiled)[0]
    check_finite_loss(per_row, "siglip", gather=gather)
    if reduction == "none":
        return per_row
    world = distributed.world_size() if gather else 1
    total = per_row.sum() * world  # Σ over ranks of the shares / R = the global sum
    return total / k_all.shape[0] if reduction == "mean" else total


@shared_docs
class SigLIPLoss(nn.Module):
    """SigLIP loss with a learnable temperature and bias, initialised as the paper (t' = log 10, b = −10).

    The inverse temperature is log-parameterised, ``t = exp(t')`` (:class:`LearnableTemperature`, whose
    ``log_scale`` is the paper's ``t'``), and clamped at ``t ≤ max_inverse`` as open_clip clamps its
    logit scale; the bias is a plain parameter. Zhai et al. 2023 (arXiv 2303.15343), Algorithm 1 and §3.2.

    Args:
        temperature: initial τ = 1/t (default 0.1, the paper's t = 10).
        bias: initial bias b (default −10, the paper's).
        learnable: learn τ and b (the paper's setting); ``False`` keeps them fixed.
        max_inverse: upper bound on t = 1/τ while learning (default 100, as open_clip).
        normalize: {normalize}
        reduction: {reductions}.
        chunk_size: rows per block of the streamed pass (see :func:`siglip`).
        gather: contrast with the positives of every rank (see :func:`siglip`).
        compiled: the compiled element-wise pass: ``False``, ``True`` or ``"auto"`` (see :func:`siglip`).

    Examples:
        >>> loss = SigLIPLoss()
        >>> round(float(loss.temperature().detach()), 4), float(loss.bias.detach())
        (0.1, -10.0)
        >>> loss(torch.randn(4, 8), torch.randn(4, 8)).shape
        torch.Size([])
    """

    def __init__(
        self,
        temperature: float = 0.1,
        bias: float = -10.0,
        *,
        learnable: bool = True,
        max_inverse: float = 100.0,
        normalize: bool = True,
        reduction: str = "mean",
        chunk_size: int | None = None,
        gather: bool = False,
        compiled: bool | str = False,
    ) -> None:
        super().__init__()
        temperature = check_positive_float("temperature", temperature)
        if isinstance(bias, Tensor):
            raise TypeError("bias must be a real number (the initial value), got a Tensor")
        _check_bias(bias, torch.float64, torch.device("cpu"))
        self.learnable = check_bool("learnable", learnable)
        _, self.normalize, self.reduction, self.gather = check_loss_options(temperature, normalize, reduction, gather)
        self.chunk_size = tiled.check_chunk_size(chunk_size)
        self.compiled = check_compiled(compiled)
        self.temperature: nn.Module | float
        self.bias: nn.Parameter | float
        if learnable:
            self.temperature = LearnableTemperature(temperature, max_inverse=max_inverse)
            self.bias = nn.Parameter(torch.tensor(float(bias)))
        else:
            self.temperature = float(temperature)
            self.bias = float(bias)

    def forward(self, anchor: Tensor, positive: Tensor) -> Tensor:
        """Return :func:`siglip` of ``anchor`` ``(N, D)`` and ``positive`` ``(N, D)``."""
        return siglip(
            anchor,
            positive,
            temperature=self.temperature,
            bias=self.bias,
            normalize=self.normalize,
            reduction=self.reduction,
            chunk_size=self.chunk_size,
            gather=self.gather,
            compiled=self.compiled,
        )

    def extra_repr(self) -> str:
        """Hyperparameters shown in ``repr``."""
        fixed = "" if self.learnable else f"temperature={self.temperature}, bias={self.bias}, "
        return f"{fixed}learnable={self.learnable}, normalize={self.normalize}, reduction={self.reduction!r}"
