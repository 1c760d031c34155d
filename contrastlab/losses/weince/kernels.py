"""WEINCE's fused loss kernels: the mixed softmax/Weibit cross-entropy with hand-written backwards.

Per row i the logits are ℓ_ij = (1 − λ_i)·s_ij/τ + λ_iβ_i·(−log(1 − s_ij)) with λ, β stop-gradient
constants (Erol et al. 2026, arXiv 2606.00262, README formula; :mod:`contrastlab.losses.weince.loss`).
:class:`_WeinceSimCLR` fuses SimCLR's square 2N × 2N case from the shortfalls 1 − s;
:class:`_MixedCrossEntropy` takes any logit matrix s/τ (explicit negatives);
:func:`_mixed_cross_entropy_autograd` is its plain-autograd reference and the path for a learnable τ
there. Larger batches of SimCLR's views stream (:mod:`contrastlab.losses.weince.stream`). None is twice
differentiable.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

__all__: list[str] = []


@functools.lru_cache(maxsize=16)
def _u_min(eps: float, dtype: torch.dtype) -> float:
    """1 − (1 − eps) as rounded in ``dtype``: the smallest shortfall 1 − s after the clamp s ≤ 1 − eps."""
    return 1.0 - torch.tensor(1.0 - eps, dtype=dtype).item()


def _weibit(cos: Tensor, eps: float) -> Tensor:
    """−log(1 − s) with s clamped to [−1, 1 − eps] (finite everywhere, also on masked −inf entries)."""
    return -torch.log1p(-cos.clamp(-1.0, 1.0 - eps))


def _mixed_cross_entropy_autograd(
    logits_pl: Tensor,
    pos_index: Tensor,
    lam: Tensor,
    lam_beta: Tensor,
    inv_t: Tensor | float,
    eps: float,
    self_cols: Tensor | None,
) -> Tensor:
    """Per-row −log softmax at ``pos_index`` of (1 − λ)·s/τ + λβ·(−log(1 − s)), with plain autograd ops.

    The reference for :class:`_MixedCrossEntropy`, and the path for a learnable temperature.
    """
    finite = logits_pl.masked_fill(torch.isinf(logits_pl), 0.0)  # no −inf/τ: its τ-gradient would be 0·inf
    logits = logits_pl * (1.0 - lam) + _weibit(finite / inv_t, eps) * lam_beta
    if self_cols is not None:  # λ_i = 1 turns 0·(−inf) into NaN there: a view is never its own candidate
        rows = torch.arange(logits.shape[0], device=logits.device)
        minus_inf = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
        logits = logits.index_put((rows, self_cols), minus_inf)
    return torch.logsumexp(logits, dim=1) - logits.gather(1, pos_index.unsqueeze(1)).squeeze(1)


class _MixedCrossEntropy(torch.autograd.Function):
    """Fused forward/backward of :func:`_mixed_cross_entropy_autograd` for a fixed temperature.

    The stop-gradient λ, λβ are constants, so ∂ℓ_ij/∂(s_ij/τ) = (1 − λ_i) + λ_i β_i τ/(1 − s_ij) (0 where s is
    clamped at 1 − eps). The forward computes the mixed logits with in-place ops and stores that
    derivative; the backward is softmax − one-hot times it: about a third of the passes over the (R, C)
    matrix that autograd makes. Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        logits_pl: Tensor,
        pos_index: Tensor,
        one_minus_lam: Tensor,
        lam_beta: Tensor,
        tau: float,
        eps: float,
        self_cols: Tensor | None,
    ) -> Tensor:
        # u = 1 − s with s = τ·(s/τ) clamped to [−1, 1 − eps]; the −inf diagonal gives u = 2.
        u_min = _u_min(eps, logits_pl.dtype)
        u = torch.rsub(logits_pl, 1.0, alpha=tau).clamp_(u_min, 2.0)
        logits = torch.log(u).mul_(-lam_beta)  # λβ·(−log(1 − s))
        logits.addcmul_(logits_pl, one_minus_lam)  # + (1 − λ)·s/τ; exactly s/τ where λ = 0
        if self_cols is not None:  # row i's own view (column self_cols[i]) is never its candidate
            logits[torch.arange(logits.shape[0], device=logits.device), self_cols] = float("-inf")
        lse = torch.logsumexp(logits, dim=1)
        loss = lse - logits.gather(1, pos_index.unsqueeze(1)).squeeze(1)
        # d logits / d(s/τ) = (1 − λ) + λβτ/(1 − s), with 1/(1 − s) := 0 where s was clamped (u set to inf).
        torch.threshold_(u, u_min, float("inf"))
        d_pl = torch.addcdiv(one_minus_lam, lam_beta * tau, u)
        ctx.save_for_backward(logits, lse, d_pl, pos_index)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        logits, lse, d_pl, pos_index = ctx.saved_tensors
        if bool((grad > 0).all()):  # the usual case (mean/sum): fold the row weight into the exponent
            g = torch.sub(logits, (lse - torch.log(grad)).unsqueeze(1)).exp_()  # grad_i·softmax_i, (R, C)
        else:
            g = torch.sub(logits, lse.unsqueeze(1)).exp_().mul_(grad.unsqueeze(1))
        g.scatter_add_(1, pos_index.unsqueeze(1), -grad.unsqueeze(1))  # − grad_i·one-hot
        return g.mul_(d_pl), None, None, None, None, None, None


#: Bytes of one block of rows of the two (R, R) buffers that :func:`_weince_rows` and
#: :func:`_weince_grad` sweep together: a block stays in cache through all of its element-wise passes
#: instead of each pass streaming both whole buffers (at 2N = 4,096 a buffer is 64 MiB; there the
#: forward sweep took 39 ms in blocks against 44 ms whole, on the benchmark machine, whose large last-level
#: cache holds much of the matrix anyway). At 2N = 512 in float32 the whole matrix is one block.
_BLOCK_BYTES = 1 << 21


def _block_rows(r: int, itemsize: int) -> int:
    """Rows per block of the element-wise sweeps over two (r, r) buffers (:data:`_BLOCK_BYTES`)."""
    return max(1, _BLOCK_BYTES // (2 * r * itemsize))


def _weince_rows(
    u: Tensor,
    pos_index: Tensor,
    a: Tensor,
    b: Tensor,
    s_max: Tensor,
    u_min: float,
    e_out: Tensor | None = None,
    rows: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """WEINCE's per-anchor loss over SimCLR's 2N views from the shortfalls ``u = 1 − s``; the fused forward.

    ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with s clamped to [−1, 1 − eps] inside the log (``u_min`` =
    1 − (1 − eps) as rounded), computed as ``(a_i − c_i) − b_i log u_ij − a_i u_ij``. a, b ≥ 0, so ℓ
    is increasing in s and the shift ``c_i`` (the row maximum of ℓ) is ℓ at the anchor's largest
    cosine ``s_max``: no pass over the matrix finds it.

    Layout: ``u`` is symmetric (1 − k kᵀ), so anchor i's shortfalls are its row and its column alike;
    the kernel reads **column i**. Each per-anchor coefficient is then a ``(1, R)`` row vector,
    contiguous along the inner dimension, and an elementwise op vectorises with several of them
    (TensorIterator vectorises an op with at most one ``(R, 1)`` operand: an ``addcmul`` with two ran
    ~4× slower, an ``addcdiv`` ~7×). The exponent takes three passes (log, one ``addcmul`` with two
    coefficient vectors, one with one), then the ``exp`` and the column sums, block of rows by block of
    rows (``rows`` per block, default :func:`_block_rows`), so that the passes of a block run in cache.

    The clamp only matters where 1 − s ≤ u_min: on the diagonal (a view against itself), which is
    masked anyway, and, off it, only in an anchor whose smallest shortfall ``1 − s_max`` is that
    small. When no anchor comes within 2·u_min of it (the margin covers the rounding of 1 − s_max
    against the entries of ``u``) the diagonal of ``u`` is set to 1 and the clamping pass is skipped.
    Otherwise ``u`` is clamped, and afterwards set to +inf where s was clamped, so that the Weibit
    slope b/u is 0 there (:func:`_weince_grad`). ``u`` is overwritten either way; ``e_out``
    (optional) receives ``Eᵀ`` instead of a fresh allocation.

    Shape:
        u: ``(R, R)``, symmetric; pos_index: ``(R,)``; a, b, s_max: ``(R, 1)``.

    Returns:
        ``(Eᵀ, col_sum, loss)``: ``Eᵀ[j, i] = exp(ℓ_ij − c_i)`` with 0 on the diagonal ``(R, R)``, its
        column sums (anchor i's softmax denominator) ``(1, R)`` and the per-anchor loss ``(R,)``.
    """
    r = u.shape[0]
    rows = _block_rows(r, u.element_size()) if rows is None else rows
    a_r, b_r = a.view(1, -1), b.view(1, -1)  # (1, R): column i is anchor i
    s_top = s_max.view(1, -1)
    u_top = torch.rsub(s_top, 1.0)  # each anchor's smallest shortfall
    clamp = float(u_top.min()) <= 2.0 * u_min
    if clamp:
        u_top.clamp_(u_min, 2.0)
    c = a_r * s_top - b_r * torch.log(u_top)  # the anchors' maxima of ℓ, (1, R)
    a_c = a_r - c
    u_pos = u.gather(0, pos_index.view(1, -1))  # (1, R), before the sweep changes u
    log_pos = torch.log(u_pos.clamp(u_min, 2.0) if clamp else u_pos)
    # ℓ_pos − c, as the sweep computes it
    pos_shifted = torch.addcmul(a_c, log_pos, b_r, value=-1.0).addcmul_(u_pos, a_r, value=-1.0)
    e = torch.empty_like(u) if e_out is None else e_out
    col_sum: Tensor | None = None
    for j0 in range(0, r, rows):
        j1 = min(r, j0 + rows)
        ub, eb = u[j0:j1], e[j0:j1]  # candidates j0..j1 of every anchor
        if clamp:
            torch.clamp(ub, u_min, 2.0, out=eb).log_()
        else:
            ub[:, j0:j1].fill_diagonal_(1.0)  # s_jj = 1 is the only shortfall below the clamp; masked below
            torch.log(ub, out=eb)
        torch.addcmul(a_c, eb, b_r, value=-1.0, out=eb).addcmul_(ub, a_r, value=-1.0)  # (a − c) − b·log u − a·u
        eb.exp_()
        eb[:, j0:j1].fill_diagonal_(0.0)  # a view is never its own candidate
        part = eb.sum(dim=0, keepdim=True)
        col_sum = part if col_sum is None else col_sum.add_(part)
        if clamp:  # 1/u := 0 where s was clamped (the diagonal included)
            torch.threshold_(ub, u_min, float("inf"))
    assert col_sum is not None
    loss = (col_sum.log() - pos_shifted).view(-1)
    return e, col_sum, loss


def _weince_grad(
    k: Tensor,
    e: Tensor,
    col_sum: Tensor,
    u: Tensor,
    pos_index: Tensor,
    a: Tensor,
    b: Tensor,
    grad: Tensor | None,
    *,
    inplace: bool,
    rows: int | None = None,
) -> Tensor:
    """∂(Σ_i grad_i loss_i)/∂k from :func:`_weince_rows`' results (``grad=None``: all ones).

    ``G = diag(grad)(softmax − one-hot) ∘ dℓ/ds`` with dℓ/ds = a + b/u (``u`` as :func:`_weince_rows`
    leaves it: +inf where s was clamped, so that b/u = 0 there, or 1 on the masked diagonal), held
    transposed like ``Eᵀ``; then ``∂k = G k + Gᵀ k`` (s = k kᵀ). The row factor w = grad/col_sum goes
    into a and b, so Gᵀ costs two passes (one ``addcdiv`` with the two coefficient vectors, one
    multiplication), block of rows by block of rows as in :func:`_weince_rows`; ``inplace`` writes them
    into ``u`` and ``e``.
    """
    r = u.shape[0]
    rows = _block_rows(r, u.element_size()) if rows is None else rows
    p = pos_index.view(1, -1)
    a_r, b_r = a.view(1, -1), b.view(1, -1)
    w = col_sum.reciprocal() if grad is None else grad.view(1, -1) / col_sum  # (1, R)
    g_pos = a_r + b_r / u.gather(0, p)  # dℓ/ds at the positives
    if grad is not None:
        g_pos = g_pos * grad.view(1, -1)
    aw, bw = a_r * w, b_r * w
    g = e if inplace else torch.empty_like(e)
    for j0 in range(0, r, rows):
        j1 = min(r, j0 + rows)
        d = torch.addcdiv(aw, bw, u[j0:j1], out=u[j0:j1] if inplace else g[j0:j1])  # (a + b/u)·grad/col_sum
        if inplace:
            e[j0:j1].mul_(d)  # Gᵀ: grad_i · softmax_i ∘ dℓ/ds in column i
        else:
            d.mul_(e[j0:j1])
    g.scatter_add_(0, p, -g_pos)  # − grad_i · one-hot(positive) ∘ dℓ/ds
    return torch.mm(g.T, k).addmm_(g, k)


def _through_normalisation(g: Tensor, k_hat: Tensor, inv_norm: Tensor) -> Tensor:
    """∂/∂x from ``g`` = ∂/∂x̂ for rows x̂ = x/‖x‖, in place on ``g``: ``(g − x̂ (x̂·g)) / ‖x‖``.

    A zero row (x̂ = 0, ``inv_norm`` 1, as :func:`contrastlab.losses.tiled.normalize_scale` treats it)
    gets ``g`` itself. Shape: g, k_hat: ``(R, D)``; inv_norm: ``(R, 1)``.
    """
    xg = torch.linalg.vecdot(k_hat, g).unsqueeze(1)  # x̂·g, (R, 1)
    return g.addcmul_(k_hat, xg, value=-1.0).mul_(inv_norm)


class _WeinceSimCLR(torch.autograd.Function):
    """WEINCE over SimCLR's 2N views from the normalised views ``k`` and their shortfalls 1 − s, fused.

    Per anchor i: ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with a_i = (1 − λ_i)/τ, b_i = λ_i β_i
    (stop-gradient constants); :func:`_weince_rows` computes the loss. With ``grad_ahead`` (the caller
    reduces the rows by a mean or a sum, so every row gets the same upstream gradient) the forward also
    computes ``∂k`` for an all-ones upstream gradient in the buffers it already has, keeps only that
    (R, D) result and the backward scales it; an unequal upstream gradient is still exact (the backward
    then recomputes). Otherwise the forward keeps E, the column sums and 1 − s for a backward of two
    passes and two GEMMs. ``u`` (the caller's ``1 − s``, symmetric) is overwritten; ``e_out``
    (optional) receives E (see :func:`weince`: one allocation per step).

    With ``k_hat`` and ``inv_norm`` given, ``k`` holds the raw rows x and ``k_hat = x·inv_norm`` their
    normalised form (``inv_norm = 1/‖x‖``, 1 for a zero row), from which ``u`` was made: the gradient
    then goes to x through the normalisation (:func:`_through_normalisation`), in the forward too, so
    that no normalisation node of its own runs in the backward. With ``grad_ahead`` and ``reduce``
    (``"mean"`` or ``"sum"``) the function returns that reduction of the rows (a 0-d tensor, the same
    operation as the caller's) and its backward is a scaling. Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        k: Tensor,
        u: Tensor,
        pos_index: Tensor,
        a: Tensor,
        b: Tensor,
        s_max: Tensor,
        eps: float,
        grad_ahead: bool,
        e_out: Tensor | None,
        k_hat: Tensor | None = None,
        inv_norm: Tensor | None = None,
        reduce: str | None = None,
    ) -> Tensor:
        u_min = _u_min(eps, u.dtype)
        e, col_sum, loss = _weince_rows(u, pos_index, a, b, s_max, u_min, e_out)
        ctx.grad_ahead, ctx.u_min, ctx.reduce = grad_ahead, u_min, reduce
        kn = k if k_hat is None else k_hat
        if grad_ahead:
            dk = _weince_grad(kn, e, col_sum, u, pos_index, a, b, None, inplace=True)
            if inv_norm is not None:
                dk = _through_normalisation(dk, kn, inv_norm)
            ctx.save_for_backward(dk, kn, pos_index, a, b, s_max, inv_norm)  # the work buffers are free again
            if reduce is not None:  # the reduction's backward is the scaling below: no node of its own
                ctx.scale = 1.0 / loss.shape[0] if reduce == "mean" else 1.0
                return loss.mean() if reduce == "mean" else loss.sum()
        else:
            ctx.save_for_backward(kn, e, col_sum, u, pos_index, a, b, inv_norm)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        nones = (None,) * 11
        if ctx.grad_ahead:
            dk, kn, pos_index, a, b, s_max, inv_norm = ctx.saved_tensors
            if ctx.reduce is not None:  # d(mean)/d(row) = 1/R, d(sum)/d(row) = 1: every row alike
                return dk * (grad * ctx.scale), *nones
            if bool((grad == grad[0]).all()):  # the same for every row: scale the gradient made ahead
                return dk * grad[0], *nones
            u = torch.rsub(kn @ kn.T, 1.0)  # unequal rows: recompute
            e, col_sum, _ = _weince_rows(u, pos_index, a, b, s_max, ctx.u_min)
            dk = _weince_grad(kn, e, col_sum, u, pos_index, a, b, grad, inplace=True)
        else:
            kn, e, col_sum, u, pos_index, a, b, inv_norm = ctx.saved_tensors
            dk = _weince_grad(kn, e, col_sum, u, pos_index, a, b, grad, inplace=False)
        return dk if inv_norm is None else _through_normalisation(dk, kn, inv_norm), *nones
