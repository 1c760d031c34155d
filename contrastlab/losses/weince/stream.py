"""Streamed WEINCE over SimCLR's 2N views: statistics and loss in blocks of anchors, memory linear in N.

Erol et al. 2026 (arXiv 2606.00262), README formula with the §2.3 statistics; see
:mod:`contrastlab.losses.weince.loss` for the loss. Per anchor i the logits over its candidates j are
ℓ_ij = a_i s_ij − b_i log(1 − s_ij) with a_i = (1 − λ_i)/τ, b_i = λ_i β_i, stop-gradient constants
that depend on every anchor's tail (the pivot ρ_0 is a quantile over the batch). So the computation is
two sweeps over blocks of anchors, each block against all 2N candidates (``rows × 2N`` entries, never
the 2N × 2N matrix):

1. **Statistics** (:func:`streamed_tail`, no gradient): the cosines of a block of anchors (one GEMM),
   each anchor's k_tail largest negatives selected from its complete row (exactly the values the dense
   kernel selects: a block holds whole rows, so no running top-k is needed per anchor) and fitted at
   once (:func:`contrastlab.losses.weince.tail._tail_fits`); only the fits (four numbers per anchor)
   are kept. The global β_t's tail is the one statistic over the whole matrix: a running pool of the
   k largest negatives of every block seen (k = max(min_tail, tail_frac·(number of negatives)); each
   block adds its own k largest and the pool is cut back to k whenever it has doubled), so it holds
   tail_frac of all negatives, the one quantity that grows as N²; the top-M indices of the auxiliary
   terms are each row's own. After the sweep the pivot ρ_0 and λ follow.
2. **Loss** (:class:`_WeinceStream`): per block of anchors the shortfalls 1 − s, laid out
   candidates × anchors (so each per-anchor coefficient is a row vector along the inner dimension,
   as in :func:`contrastlab.losses.weince.kernels._weince_rows`), the exponent shifted by the
   anchor's known maximum (from its largest cosine), ``exp`` and the column sums. A block's column
   sums are complete (every candidate is in it), so its softmax is final: with a mean or a sum the
   gradient is formed right away, ``Gᵀ = E ∘ (a + b/(1 − s))/Σ − one-hot`` and two GEMMs
   (``∂k += Gᵀ q_block``, ``∂q_block = G k``) while the block is in cache; with ``reduction="none"``
   the backward runs the same sweep with the row weights.

Cost against the dense kernel: one more GEMM (four in all: the statistics' cosines, the loss's, and the
two gradient GEMMs, as many as NT-Xent's three plus one) and no (2N, 2N) buffer. Float32 rows within
:data:`contrastlab.losses.weince.tail.ENDPOINT_SHORTFALL` of the endpoint get their shortfalls from
float64 cosines in both sweeps, as in the dense kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor

from contrastlab.losses.compiled_choice import measured_choice
from contrastlab.losses.weince.compiled import compiled_weince_block
from contrastlab.losses.weince.tail import (
    _concat_fits,
    _crowded_rows,
    _refine_rows,
    _tail_fits,
    _TailFits,
    _top_values,
)

__all__: list[str] = []

#: Bytes of one block buffer (``rows × 2N`` entries) of the streamed sweeps; each sweep holds two (the
#: shortfalls and the exponentials). 8 MiB: two of them are the 16 MiB block of NT-Xent's streamed
#: sweep (:mod:`contrastlab.losses.tiled`), so the two losses' peaks stay comparable. At 2N = 4,096 in
#: float32 a block is 512 anchors, at 2N = 32,768 it is 64.
STREAM_BLOCK_BYTES = 1 << 23


def block_anchors(n_cols: int, itemsize: int, chunk_size: int | None) -> int:
    """Anchors per block of the streamed sweeps: ``chunk_size``, or :data:`STREAM_BLOCK_BYTES` worth of rows."""
    if chunk_size is not None:
        return chunk_size
    return max(1, STREAM_BLOCK_BYTES // (n_cols * itemsize))


def _flat_block(buf: Tensor, rows: int, cols: int) -> Tensor:
    """A contiguous ``(rows, cols)`` view at the start of the flat buffer ``buf``."""
    return buf[: rows * cols].view(rows, cols)


class StreamedTail(NamedTuple):
    """What the statistics sweep (:func:`streamed_tail`) keeps: O(R) per anchor, plus the global pool.

    Attributes:
        fits: each anchor's own fits (β̂, R², ΔAIC, ρ), float64 numpy ``(R,)`` each.
        s_max: each anchor's largest cosine, its positive included (the loss's shift). ``(R, 1)``.
        crowded: the anchors whose statistics (and shortfalls) come from float64 cosines. ``(r,)``.
        pool: at least the ``pool_k`` largest negative cosines of these anchors, or ``None``.
        top_idx: each anchor's ``top_m`` hardest negatives (columns), or ``None``. ``(R, M)``.
    """

    fits: _TailFits
    s_max: Tensor
    crowded: Tensor
    pool: Tensor | None
    top_idx: Tensor | None


@torch.no_grad()
def streamed_tail(
    local: Tensor,
    views: Tensor,
    self_cols: Tensor,
    pos_index: Tensor,
    *,
    k_tail: int,
    rows: int,
    eps: float,
    views64: Callable[[], Tensor],
    pool_k: int = 0,
    top_m: int = 0,
) -> StreamedTail:
    """The statistics sweep: every anchor's tail fits from blocks of ``rows`` anchors against all candidates.

    Args:
        local: the anchors (normalised views). Shape ``(R, D)``.
        views: every candidate (normalised views; ``local`` in one process). Shape ``(C, D)``.
        self_cols: each anchor's own column among the candidates (left out). Shape ``(R,)``.
        pos_index: each anchor's positive column (left out of the tail). Shape ``(R,)``.
        k_tail: the per-anchor tail size.
        rows: anchors per block.
        eps: the shortfall floor.
        views64: returns ``views`` recomputed in float64 (called only when a float32 anchor crowds the
            endpoint). Shape ``(C, D)``.
        pool_k: the size of the running pool of the largest negatives (0: none).
        top_m: each anchor's number of hardest negatives to index (0: none).
    """
    r, c = local.shape[0], views.shape[0]
    local, views = local.detach(), views.detach()
    dtype = local.dtype
    buf = local.new_empty(min(rows, r) * c)
    fits: list[_TailFits] = []
    s_max, crowded, top_idx, parts = [], [], [], []
    held = 0  # values in the pool's parts
    for i0 in range(0, r, rows):
        i1 = min(r, i0 + rows)
        cos = torch.mm(local[i0:i1], views.T, out=_flat_block(buf, i1 - i0, c))  # (b, C)
        ar = torch.arange(i1 - i0, device=cos.device)
        sc, pc = self_cols[i0:i1], pos_index[i0:i1]
        s_pos = cos[ar, pc].unsqueeze(1)  # (b, 1), read before the masking
        cos[ar, sc] = float("-inf")
        cos[ar, pc] = float("-inf")
        if top_m:
            top_idx.append(torch.topk(cos, k=top_m, dim=1).indices)
        if pool_k:  # the block's pool_k largest (its −inf entries may come along: they are never fitted)
            parts.append(_largest(cos.flatten(), pool_k))  # a copy: the selection below reorders the block
            held += parts[-1].numel()
            if held >= 2 * pool_k:  # amortised: cut back to pool_k once the pool has doubled
                parts = [_largest(torch.cat(parts), pool_k, inplace=True)]
                held = pool_k
        top = _top_values(cos, k_tail, inplace=True)  # the block's buffer is the working copy
        rows_c = _crowded_rows(top, dtype)
        if rows_c.numel():  # float64 cosines for these anchors: their shortfalls keep their digits
            v64 = views64()
            rows_c = rows_c.to(local.device)
            cos64 = v64[sc[rows_c]] @ v64.T  # (r_c, C)
            s_pos[rows_c] = cos64.gather(1, pc[rows_c].unsqueeze(1)).to(dtype)
            top = _refine_rows(top, rows_c, _top_values(cos64, k_tail, exclude=(sc[rows_c], pc[rows_c]), inplace=True))
            crowded.append(rows_c + i0)
        fits.append(_tail_fits(top, eps))
        s_max.append(torch.maximum(top[:, :1].to(dtype=dtype, device=local.device), s_pos))
    none = torch.zeros(0, dtype=torch.long, device=local.device)
    return StreamedTail(
        _concat_fits(fits),
        torch.cat(s_max),
        torch.cat(crowded) if crowded else none,
        _largest(torch.cat(parts), pool_k, inplace=True) if parts else None,
        torch.cat(top_idx) if top_idx else None,
    )


def _largest(x: Tensor, k: int, *, inplace: bool = False) -> Tensor:
    """The ``k`` largest entries of the 1-d ``x`` (all of them when it has fewer), in no particular order.

    On the CPU a numpy partition (of ``x`` itself with ``inplace``, else of a copy), which needs no
    index array (``torch.topk`` returns int64 indices: twice the values' bytes in float32); elsewhere
    ``torch.topk``.
    """
    if x.numel() <= k:
        return x if inplace else x.clone()
    if x.device.type == "cpu":
        xn = x.numpy() if inplace else x.numpy().copy()
        xn.partition(xn.shape[0] - k)
        return torch.from_numpy(xn[xn.shape[0] - k :].copy())
    return torch.topk(x, k=k, sorted=False).values


class Coefficients(NamedTuple):
    """The loss's per-anchor constants, as ``(1, R)`` row vectors (column i is anchor i).

    Attributes:
        a: (1 − λ_i)/τ.
        b: λ_i β_i.
        a_c: a_i − c_i, with c_i = ℓ at the anchor's largest cosine (the row maximum of ℓ).
        one_minus_lam: 1 − λ_i (the factor of the τ-gradient).
        u_min: the smallest shortfall after the clamp s ≤ 1 − eps, as rounded.
        clamp: whether an anchor comes within 2·u_min of the endpoint (then the clamping pass runs).
    """

    a: Tensor
    b: Tensor
    a_c: Tensor
    one_minus_lam: Tensor
    u_min: float
    clamp: bool


def coefficients(lam: Tensor, lam_beta: Tensor, s_max: Tensor, inv_t: float, u_min: float) -> Coefficients:
    """:class:`Coefficients` from λ ``(R,)``, λβ ``(R,)``, the largest cosines ``(R, 1)`` and 1/τ.

    The same operations as :func:`contrastlab.losses.weince.kernels._weince_rows`' shift.
    """
    a = torch.rsub(lam, inv_t, alpha=inv_t).view(1, -1)  # (1 − λ)/τ
    b = lam_beta.reshape(1, -1)
    s_top = s_max.view(1, -1)
    u_top = torch.rsub(s_top, 1.0)
    clamp = float(u_top.min()) <= 2.0 * u_min
    if clamp:
        u_top.clamp_(u_min, 2.0)
    c = a * s_top - b * torch.log(u_top)
    return Coefficients(a, b, a - c, torch.rsub(lam, 1.0).view(1, -1), u_min, clamp)


class Refinement(NamedTuple):
    """Where the loss's shortfalls come from float64 cosines (float32 anchors crowding the endpoint).

    Attributes:
        views64: every candidate, normalised in float64. Shape ``(C, D)``.
        anchors: the local anchors recomputed (their columns). Shape ``(R,)``, bool.
        cands: the candidates that are recomputed anchors of any rank (their rows). Shape ``(r,)``.
    """

    views64: Tensor
    anchors: Tensor
    cands: Tensor


class SweepPlan(NamedTuple):
    """What a loss sweep reads besides the anchors and the candidates (:func:`_sweep`, :func:`_sweep_compiled`).

    Attributes:
        pos_index: each anchor's positive column among the candidates. Shape ``(R,)``, long.
        self_cols: each anchor's own column, left out of its softmax. Shape ``(R,)``, long.
        co: the per-anchor constants (:class:`Coefficients`).
        refine: where the shortfalls come from float64 cosines, or ``None``.
        rows: anchors per block.
    """

    pos_index: Tensor
    self_cols: Tensor
    co: Coefficients
    refine: Refinement | None
    rows: int


def _shortfalls(
    q: Tensor, k: Tensor, i0: int, i1: int, self_cols: Tensor, refine: Refinement | None, out: Tensor
) -> Tensor:
    """``u = 1 − s`` of anchors ``i0:i1`` (columns) against every candidate (rows), into ``out`` ``(C, b)``.

    Entries of recomputed candidates (rows), then of recomputed anchors (columns), are ``1 − s`` in float64
    rounded to the compute dtype, in that order, as the dense kernel writes them.
    """
    u = torch.mm(k, q[i0:i1].T, out=out)
    u.neg_().add_(1.0)  # 1 − s, one rounding
    if refine is not None:
        v64 = refine.views64
        if refine.cands.numel():
            u[refine.cands] = torch.rsub(v64[refine.cands] @ v64[self_cols[i0:i1]].T, 1.0).to(u.dtype)
        cols = torch.nonzero(refine.anchors[i0:i1]).squeeze(1)
        if cols.numel():
            u[:, cols] = torch.rsub(v64 @ v64[self_cols[i0 + cols]].T, 1.0).to(u.dtype)
    return u


class _Sweep(NamedTuple):
    """The results of one loss sweep: per-anchor loss, τ-factor, and the gradients (or ``None``)."""

    loss: Tensor
    tau_factor: Tensor | None
    dq: Tensor | None
    dk: Tensor | None


def _sweep(
    q: Tensor, k: Tensor, plan: SweepPlan, *, want_grad: bool, grad: Tensor | None = None, want_tau: bool = False
) -> _Sweep:
    """One sweep over blocks of ``rows`` anchors: the loss, and with ``want_grad`` ∂(Σ_i grad_i loss_i)/∂(q, k).

    ``grad=None`` weighs every anchor by 1. ``want_tau`` also returns each anchor's ∂loss_i/∂a_i =
    u_pos − Σ_j p_ij u_ij (the τ-gradient is Σ_i grad_i (1 − λ_i) times it). Shapes: q ``(R, D)``,
    k ``(C, D)``; returns the loss ``(R,)``, ``dq`` ``(R, D)``, ``dk`` ``(C, D)``.
    """
    pos_index, self_cols, co, refine, rows = plan
    r, c = q.shape[0], k.shape[0]
    b_max = min(rows, r)
    buf = q.new_empty(2, b_max * c)
    loss = q.new_empty(r)
    tau_factor = q.new_empty(r) if want_tau else None
    dq = torch.empty_like(q) if want_grad else None
    dk = torch.zeros_like(k) if want_grad else None
    u_min = co.u_min
    for i0 in range(0, r, rows):
        i1 = min(r, i0 + rows)
        bsz = i1 - i0
        ar = torch.arange(bsz, device=q.device)
        sr, pr = self_cols[i0:i1], pos_index[i0:i1]  # rows of the block's self and positive entries
        a_r, b_r, a_c = co.a[:, i0:i1], co.b[:, i0:i1], co.a_c[:, i0:i1]
        u = _shortfalls(q, k, i0, i1, self_cols, refine, _flat_block(buf[0], c, bsz))  # (C, b)
        e = _flat_block(buf[1], c, bsz)
        u_pos = u[pr, ar].unsqueeze(0)  # (1, b), before the sweep changes u
        log_pos = torch.log(u_pos.clamp(u_min, 2.0) if co.clamp else u_pos)
        pos_shifted = torch.addcmul(a_c, log_pos, b_r, value=-1.0).addcmul_(u_pos, a_r, value=-1.0)
        if co.clamp:
            torch.clamp(u, u_min, 2.0, out=e).log_()
        else:
            u[sr, ar] = 1.0  # s_ii = 1 is the only shortfall below the clamp; masked below
            torch.log(u, out=e)
        torch.addcmul(a_c, e, b_r, value=-1.0, out=e).addcmul_(u, a_r, value=-1.0)  # (a − c) − b·log u − a·u
        e.exp_()
        e[sr, ar] = 0.0  # a view is never its own candidate
        col_sum = e.sum(dim=0, keepdim=True)  # (1, b): complete, every candidate is in the block
        loss[i0:i1] = (col_sum.log() - pos_shifted).view(-1)
        if tau_factor is not None:  # Σ_j p_ij s_ij − s_pos = u_pos − Σ_j p_ij u_ij (u unclamped here)
            tau_factor[i0:i1] = (u_pos - torch.linalg.vecdot(e, u, dim=0).unsqueeze(0) / col_sum).view(-1)
        if not want_grad:
            continue
        assert dq is not None and dk is not None
        if co.clamp:  # 1/u := 0 where s was clamped (the self entries included)
            torch.threshold_(u, u_min, float("inf"))
        g_pos = a_r + b_r / u[pr, ar].unsqueeze(0)  # dℓ/ds at the positives
        w = col_sum.reciprocal()
        if grad is not None:
            gb = grad[i0:i1].view(1, -1)
            w, g_pos = w * gb, g_pos * gb
        d = torch.addcdiv(a_r * w, b_r * w, u, out=u)  # (a + b/u)·grad/Σ
        g = e.mul_(d)  # Gᵀ: candidates × anchors
        g[pr, ar] -= g_pos.view(-1)  # − grad_i · one-hot(positive) ∘ dℓ/ds
        torch.mm(g.T, k, out=dq[i0:i1])  # ∂ through the anchors: Σ_j G_ij k_j
        dk.addmm_(g, q[i0:i1])  # ∂ through the candidates: Σ_i G_ij q_i
    return _Sweep(loss, tau_factor, dq, dk)


def _shortfalls_by_anchor(
    q: Tensor, k: Tensor, i0: int, i1: int, self_cols: Tensor, refine: Refinement | None, out: Tensor
) -> Tensor:
    """:func:`_shortfalls` laid out anchors × candidates: ``u = 1 − s`` ``(b, C)`` into ``out``.

    The GEMM writes ``1 − s`` itself (``addmm`` of 1 with ``alpha = −1``, one rounding as in
    :func:`_shortfalls`); the float64 entries are the same values, transposed, written in the same order.
    """
    u = torch.addmm(q.new_ones(()), q[i0:i1], k.T, alpha=-1.0, out=out)
    if refine is not None:
        v64 = refine.views64
        if refine.cands.numel():
            u[:, refine.cands] = torch.rsub(v64[refine.cands] @ v64[self_cols[i0:i1]].T, 1.0).T.to(u.dtype)
        rows = torch.nonzero(refine.anchors[i0:i1]).squeeze(1)
        if rows.numel():
            u[rows] = torch.rsub(v64 @ v64[self_cols[i0 + rows]].T, 1.0).T.to(u.dtype)
    return u


def _sweep_compiled(
    q: Tensor, k: Tensor, plan: SweepPlan, *, want_grad: bool, grad: Tensor | None = None, want_tau: bool = False
) -> _Sweep:
    """:func:`_sweep` with each block's element-wise work done by compiled functions, anchors × candidates.

    The functions are :mod:`contrastlab.losses.weince.compiled`'s; one block buffer holds the shortfalls
    and then, in place, the gradient block.
    """
    pos_index, self_cols, co, refine, rows = plan
    r, c = q.shape[0], k.shape[0]
    buf = q.new_empty(min(rows, r) * c)  # one block: the shortfalls, then the gradient block in place
    loss = q.new_empty(r)
    tau_factor = q.new_empty(r) if want_tau else None
    dq = torch.empty_like(q) if want_grad else None
    dk = torch.zeros_like(k) if want_grad else None
    u_min = co.u_min
    u_min_t = torch.tensor(u_min, dtype=q.dtype, device=q.device)
    block_sums, gradient_block_ = compiled_weince_block()
    for i0 in range(0, r, rows):
        i1 = min(r, i0 + rows)
        bsz = i1 - i0
        ar = torch.arange(bsz, device=q.device)
        sr, pr = self_cols[i0:i1].unsqueeze(1), pos_index[i0:i1]  # the block's self (b, 1) and positive columns
        a_r, b_r, a_c = co.a[:, i0:i1].T, co.b[:, i0:i1].T, co.a_c[:, i0:i1].T  # (b, 1) each
        u = _shortfalls_by_anchor(q, k, i0, i1, self_cols, refine, _flat_block(buf, bsz, c))  # (b, C)
        u_pos = u[ar, pr].unsqueeze(1)  # (b, 1)
        log_pos = torch.log(u_pos.clamp(u_min, 2.0) if co.clamp else u_pos)
        pos_shifted = torch.addcmul(a_c, log_pos, b_r, value=-1.0).addcmul_(u_pos, a_r, value=-1.0)
        col_sum, eu = block_sums(u, a_c, b_r, a_r, sr, u_min_t)  # (b, 1) each: Σ_j p̃_ij, Σ_j p̃_ij u_ij
        loss[i0:i1] = (col_sum.log() - pos_shifted).view(-1)
        if tau_factor is not None:
            tau_factor[i0:i1] = (u_pos - eu / col_sum).view(-1)
        if not want_grad:
            continue
        assert dq is not None and dk is not None
        inv_pos = torch.where(u_pos > u_min, u_pos.reciprocal(), 0.0) if co.clamp else u_pos.reciprocal()
        g_pos = a_r + b_r * inv_pos  # dℓ/ds at the positives
        w = col_sum.reciprocal()
        if grad is not None:
            gb = grad[i0:i1].view(-1, 1)
            w, g_pos = w * gb, g_pos * gb
        gradient_block_(u, a_c, b_r, a_r, sr, u_min_t, w)  # G without the one-hot term, in place
        u[ar, pr] -= g_pos.view(-1)
        torch.mm(u, k, out=dq[i0:i1])
        dk.addmm_(u.T, q[i0:i1])
    return _Sweep(loss, tau_factor, dq, dk)


def compiled_is_faster(q: Tensor, k: Tensor, plan: SweepPlan, want_grad: bool) -> bool:
    """``compiled="auto"``: whether :func:`_sweep_compiled` beat :func:`_sweep` on the first block of anchors.

    Both sweeps run on the first ``rows`` anchors (their GEMMs included, the same in both); measured once
    per (device, dtype, block rows, power of two of the candidates, gradient) and process
    (:func:`contrastlab.losses.compiled_choice.measured_choice`).
    """
    r, c = min(plan.rows, q.shape[0]), k.shape[0]
    key = ("weince", q.device.type, q.dtype, r, max(1, c - 1).bit_length(), want_grad)

    def make() -> tuple[Callable[[], object], Callable[[], object]]:
        args = (q[:r].detach(), k.detach(), plan)
        return partial(_sweep, *args, want_grad=want_grad), partial(_sweep_compiled, *args, want_grad=want_grad)

    return measured_choice(key, make, device=q.device)


class _WeinceStream(torch.autograd.Function):
    """WEINCE's per-anchor loss over SimCLR's views, streamed in blocks of anchors (:func:`_sweep`).

    ``q`` are the anchors and ``k`` every candidate (normalised views; the same tensor in one process),
    ``inv_t`` 1/τ as a 0-d tensor (its gradient, the softmax part's only, is formed when it requires
    one). With ``grad_ahead`` (the caller reduces the rows by a mean or a sum) the forward forms the
    gradient for an all-ones upstream gradient and the backward scales it (an unequal upstream gradient
    runs the sweep again); otherwise the backward runs the sweep with the row weights. Nothing of size
    ``R × C`` is kept between forward and backward; memory: two ``rows × C`` blocks plus O((R + C)·D).
    Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: Tensor,
        k: Tensor,
        inv_t: Tensor,
        plan: SweepPlan,
        grad_ahead: bool,
        compiled: bool = False,
    ) -> Tensor:
        want_tau = bool(ctx.needs_input_grad[2])
        sweep = _sweep_compiled if compiled else _sweep
        res = sweep(q, k, plan, want_grad=grad_ahead, want_tau=want_tau)
        ctx.sweep = sweep
        ctx.plan = plan
        ctx.grad_ahead = grad_ahead
        ctx.tau_factor = res.tau_factor
        ctx.save_for_backward(q, k)
        ctx.ahead = (res.dq, res.dk) if grad_ahead else None
        return res.loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q, k = ctx.saved_tensors
        dq: Tensor | None = None
        dk: Tensor | None = None
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):  # only τ: its factor is already made
            pass
        elif ctx.ahead is not None and bool((grad == grad[0]).all()):  # every row alike: scale what was made
            dq, dk = (x * grad[0] for x in ctx.ahead)
        else:
            res = ctx.sweep(q, k, ctx.plan, want_grad=True, grad=grad)
            dq, dk = res.dq, res.dk
        d_inv_t = None
        if ctx.tau_factor is not None:
            co: Coefficients = ctx.plan.co
            d_inv_t = (grad * co.one_minus_lam.view(-1) * ctx.tau_factor).sum()
        return dq, dk, d_inv_t, None, None, None


class _GatherDot(torch.autograd.Function):
    """``out[r, m] = q_r · k_{idx[r, m]}`` in blocks of rows, each block's ``rows × C`` products by a GEMM.

    The products are gathered; the backward scatters the block's gradient into ``rows × C`` and makes
    two GEMMs.

    Gathering the chosen rows of ``k`` instead (an ``(R, M, D)`` copy and an ``index_add_`` of as many
    outer products) was slower at 2N = 512 and no faster at 2N = 4,096 with M = 51, D = 128 (measured,
    one thread), and its memory grows with M·D rather than with C.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, idx: Tensor, rows: int) -> Tensor:  # type: ignore[override]
        r, c = q.shape[0], k.shape[0]
        buf = q.new_empty(min(rows, r) * c)
        out = q.new_empty(idx.shape)
        for r0 in range(0, r, rows):
            r1 = min(r, r0 + rows)
            s = torch.mm(q[r0:r1], k.T, out=_flat_block(buf, r1 - r0, c))
            torch.gather(s, 1, idx[r0:r1], out=out[r0:r1])
        ctx.rows = rows
        ctx.save_for_backward(q, k, idx)
        return out

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q, k, idx = ctx.saved_tensors
        r, c = q.shape[0], k.shape[0]
        buf = q.new_empty(min(ctx.rows, r) * c)
        dq, dk = torch.empty_like(q), torch.zeros_like(k)
        for r0 in range(0, r, ctx.rows):
            r1 = min(r, r0 + ctx.rows)
            gs = _flat_block(buf, r1 - r0, c).zero_().scatter_add_(1, idx[r0:r1], g[r0:r1])
            torch.mm(gs, k, out=dq[r0:r1])
            dk.addmm_(gs.T, q[r0:r1])
        return dq, dk, None, None


def gather_dot(q: Tensor, k: Tensor, idx: Tensor, *, rows: int) -> Tensor:
    """``out[r, m] = q_r · k_{idx[r, m]}``: the logits of chosen candidates, in blocks of ``rows × C``.

    Shape: q ``(R, D)``, k ``(C, D)``, idx ``(R, M)`` (long); returns ``(R, M)``.
    """
    return _GatherDot.apply(q, k, idx, rows)
