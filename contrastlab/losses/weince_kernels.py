"""WEINCE's fused loss kernels: the mixed softmax/Weibit cross-entropy with hand-written backwards.

Per row i the logits are ℓ_ij = (1 − λ_i)·s_ij/τ + λ_iβ_i·(−log(1 − s_ij)) with λ, β stop-gradient
constants (Erol et al. 2026, arXiv 2606.00262, README formula; :mod:`contrastlab.losses.weince`).
:class:`_WeinceSimCLR` fuses SimCLR's square 2N × 2N case from the shortfalls 1 − s;
:class:`_MixedCrossEntropy` takes any logit matrix s/τ (explicit negatives, gathered candidates, the
auxiliary terms' inputs); :func:`_mixed_cross_entropy_autograd` is their plain-autograd reference and
the path for a learnable τ. None is twice differentiable.
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


def _weince_rows(
    u: Tensor,
    pos_index: Tensor,
    a: Tensor,
    b: Tensor,
    s_max: Tensor,
    u_min: float,
    e_out: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """WEINCE's per-row loss over SimCLR's 2N views from the shortfalls ``u = 1 − s``; the fused forward.

    ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with s clamped to [−1, 1 − eps] inside the log (``u_min`` =
    1 − (1 − eps) as rounded), computed as ``a_i − a_i u_ij − b_i log(clamp(u_ij))``. a, b ≥ 0, so ℓ is
    increasing in s and the row maximum ``c`` is ℓ at the row's largest cosine ``s_max``: the shift
    needs no pass over the matrix. ``e_out`` (optional) receives ``E`` instead of a fresh allocation.

    Shape:
        u: ``(R, R)``; pos_index: ``(R,)``; a, b, s_max: ``(R, 1)``.

    Returns:
        ``(E, row_sum, loss)``: ``E = exp(ℓ − c)`` with 0 on the diagonal ``(R, R)``, its row sums
        ``(R, 1)`` and the per-row loss ``(R,)``.
    """
    c = a * s_max - b * torch.log(torch.rsub(s_max, 1.0).clamp_(u_min, 2.0))  # row maxima of ℓ, (R, 1)
    # −b·log(1 − s) + (a − c) − a·(1 − s). (Each op has one (R, 1) operand: TensorIterator vectorises
    # those; an addcmul with two broadcast operands runs ~4× slower here.)
    e = torch.clamp(u, u_min, 2.0, out=e_out).log_().mul_(-b).add_(a - c).addcmul_(u, -a)  # ℓ − c
    pos_shifted = e.gather(1, pos_index.unsqueeze(1))  # ℓ_pos − c, (R, 1)
    e.exp_().fill_diagonal_(0.0)  # a view is never its own candidate
    row_sum = e.sum(dim=1, keepdim=True)
    loss = (row_sum.log() - pos_shifted).squeeze(1)
    return e, row_sum, loss


def _mark_clamped(u: Tensor, s_max: Tensor, u_min: float) -> None:
    """Set ``u = 1 − s`` to +inf where s was clamped at 1 − eps (there b/u, the Weibit slope, is 0).

    The diagonal (a view against itself, s = 1) always is; when every row's largest off-diagonal cosine
    ``s_max`` is below the clamp, only the diagonal is touched instead of a pass over the matrix.
    """
    if float((1.0 - s_max).min()) > u_min:
        u.fill_diagonal_(float("inf"))
    else:
        torch.threshold_(u, u_min, float("inf"))


def _weince_grad(
    k: Tensor,
    e: Tensor,
    row_sum: Tensor,
    u: Tensor,
    pos_index: Tensor,
    a: Tensor,
    b: Tensor,
    grad: Tensor | None,
    *,
    inplace: bool,
) -> Tensor:
    """∂(Σ_i grad_i loss_i)/∂k from :func:`_weince_rows`' results (``grad=None``: all ones).

    ``G = diag(grad)(softmax − one-hot) ∘ dℓ/ds`` with dℓ/ds = a + b/u, ``u = 1 − s`` (+inf where s was
    clamped, so that b/u = 0 there), then ``∂k = G k + Gᵀ k`` (s = k kᵀ). The row factor
    grad_i/row_sum_i is folded into a and b, so G costs three passes; ``inplace`` writes them into ``u``
    and ``e``.
    """
    w = row_sum.reciprocal() if grad is None else grad.unsqueeze(1) / row_sum  # (R, 1)
    g_pos = (a + b / u.gather(1, pos_index.unsqueeze(1))) * (1.0 if grad is None else grad.unsqueeze(1))
    d = torch.div(b * w, u, out=u if inplace else None).add_(a * w)  # (a + b/u)·grad/row_sum
    g = e.mul_(d) if inplace else e * d  # grad_i · softmax_i ∘ dℓ/ds
    g.scatter_add_(1, pos_index.unsqueeze(1), -g_pos)  # − grad_i · one-hot(positive) ∘ dℓ/ds
    return torch.mm(g, k).addmm_(g.T, k)


class _WeinceSimCLR(torch.autograd.Function):
    """WEINCE over SimCLR's 2N views from the normalised views ``k`` and their shortfalls 1 − s, fused.

    Per row i: ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with a_i = (1 − λ_i)/τ, b_i = λ_i β_i (stop-gradient
    constants); :func:`_weince_rows` computes the loss. With ``grad_ahead`` (the caller reduces the rows
    by a mean or a sum, so every row gets the same upstream gradient) the forward also computes
    ``∂k`` for an all-ones upstream gradient in the buffers it already has, keeps only that (R, D)
    result and the backward scales it; an unequal upstream gradient is still exact (the backward then
    recomputes). Otherwise the forward keeps E, the row sums and 1 − s for a backward of three passes
    and two GEMMs. ``u`` (the caller's ``1 − s``) is overwritten; ``e_out`` (optional) receives E (see
    :func:`weince`: one allocation per step). Not twice differentiable.
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
    ) -> Tensor:
        u_min = _u_min(eps, u.dtype)
        e, row_sum, loss = _weince_rows(u, pos_index, a, b, s_max, u_min, e_out)
        _mark_clamped(u, s_max, u_min)
        ctx.grad_ahead, ctx.u_min = grad_ahead, u_min
        if grad_ahead:
            dk = _weince_grad(k, e, row_sum, u, pos_index, a, b, None, inplace=True)
            ctx.save_for_backward(dk, k, pos_index, a, b, s_max)  # the work buffers are free again
        else:
            ctx.save_for_backward(k, e, row_sum, u, pos_index, a, b)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        if ctx.grad_ahead:
            dk, k, pos_index, a, b, s_max = ctx.saved_tensors
            if bool((grad == grad[0]).all()):  # the same for every row: scale the gradient made ahead
                return dk * grad[0], *(None,) * 8
            u = torch.rsub(k @ k.T, 1.0)  # unequal rows: recompute
            e, row_sum, _ = _weince_rows(u, pos_index, a, b, s_max, ctx.u_min)
            _mark_clamped(u, s_max, ctx.u_min)
            return _weince_grad(k, e, row_sum, u, pos_index, a, b, grad, inplace=True), *(None,) * 8
        k, e, row_sum, u, pos_index, a, b = ctx.saved_tensors
        return _weince_grad(k, e, row_sum, u, pos_index, a, b, grad, inplace=False), *(None,) * 8
