"""Masked / weighted InfoNCE in one streamed sweep: numerator and denominator from the same block.

With extra positives ``P(i)`` and per-candidate weights ``w_ij ≥ 0`` the in-batch InfoNCE / DCL loss is

    ℓ_i = log Σ_{j∈C(i)} w_ij e^{S_ij} − log Σ_{j∈P(i)} w_ij e^{S_ij}

(Khosla et al. 2020, arXiv 2004.11362, eq. 3, "sum inside the log"; C(i) every candidate for InfoNCE,
every candidate not in P(i) for DCL, Yeh et al. 2022, arXiv 2110.06848, eq. 6). Both sums are over the
same row of ``S = Q Kᵀ``, so one block of ``E = exp(S − c)`` (rows × M, in cache) gives both: the row
shift ``c_i`` cancels in the ratio. Its gradient is

    ∂ℓ_i/∂S_ij = Wd_ij E_ij / den_i − Wn_ij E_ij / num_i        (Wd, Wn the two weight patterns),

formed in place on the block, after which ``∂Q = G K`` and ``∂K += Gᵀ Q`` run on it while it is still in
cache. When the positives are the own positive and a list of entries (no dense mask), only those entries of
the block change, ``E − diag(den/num) P``, and the row factor ``1/den`` scales the (r, D) sides of the two
GEMMs instead of the block, as the unmasked path does. Three GEMMs per block, as for the unmasked loss
(:func:`contrastlab.losses.tiled.dense_row_lse` with ``grad_ahead``), instead of two weighted sweeps of
three GEMMs each plus the (N, M) log-weight arrays they need.

The forward makes the gradient for an upstream gradient that is the same for every row (what a mean
or a sum sends); the backward scales it then, and otherwise sweeps again with the rows weighted, so the
gradient is exact either way. A row whose sums come out below ``1e-20`` of the shift (a row with no
positive or no negative of nonzero weight, or logits so spread that the pre-chosen shift overshot)
makes :func:`masked_log_ratio` return ``None``: the caller then runs the general path, which raises
the right error or recomputes those rows exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from contrastlab.losses import tiled
from contrastlab.losses.compiled_choice import measured_choice
from contrastlab.losses.masked_ratio_compiled import compiled_softmax_rows

__all__ = ["masked_log_ratio"]

# Rows per block: the sweep holds up to three blocks (E, its positive part, the scaled weights), each of
# about 8 MiB, so that together they stay in cache; a sweep that needs E alone (no weights, and the
# positives as a list of entries) uses one block of twice that, as the unmasked path does.
_BLOCK_BYTES = 1 << 23
# A mask with at most one entry in this many set (counted in 8-column words, see _mask_entries) is handled
# as a list of entries, gathered and scattered per block, rather than by a masked copy of every block: a few
# duplicates per row then cost O(nnz) per block, not O(N·M).
_SPARSE_FRACTION = 16
# A row sum below this (relative to the shift) means an empty set or an overshooting shift: no result.
_MIN_ROW_SUM = 1e-20


class _RowSumUnderflow(Exception):
    """A row's numerator or denominator sum fell below ``_MIN_ROW_SUM`` (see the module docstring)."""


def _mask_entries(mask: Tensor, col_offset: int) -> tuple[Tensor, Tensor] | None:
    """The extra positives as (rows, columns), row-major, own positives left out; ``None`` if the mask is dense.

    ``nonzero`` of an N × M bool tensor takes several passes over N·M bytes; the mask is read instead as
    8-byte words (8 columns each), only the nonzero words are expanded into their columns. A mask with
    more than one nonzero word in ``8 · _SPARSE_FRACTION`` is dense here: ``None``.
    """
    n, m_cols = mask.shape
    if m_cols % 8 or not mask.is_contiguous():
        idx = mask.nonzero()
        if idx.shape[0] > mask.numel() // _SPARSE_FRACTION:
            return None
        rows, cols = idx[:, 0], idx[:, 1]
    else:
        words = mask.view(torch.int64)  # (N, M / 8): a word is nonzero iff one of its 8 entries is set
        nzw = _nonzero_words(words, mask.numel() // (8 * _SPARSE_FRACTION))  # (W, 2): row, word
        if nzw is None:
            return None
        first = nzw[:, 1] * 8  # (W,): the first column of each word
        cells = mask[nzw[:, 0, None], first[:, None] + torch.arange(8, device=mask.device)]  # (W, 8) bool
        sub = cells.nonzero()  # (nnz, 2): word, byte; row-major overall, as the words are
        rows, cols = nzw[sub[:, 0], 0], first[sub[:, 0]] + sub[:, 1]
    keep = cols != rows + col_offset
    return rows[keep].contiguous(), cols[keep].contiguous()


def _nonzero_words(words: Tensor, limit: int) -> Tensor | None:
    """``words.nonzero()`` (W, 2), row-major, when W ≤ ``limit``; ``None`` when W > ``limit``.

    ``nonzero`` runs on one thread, so the (N, V) words are first reduced by a parallel element-wise
    maximum of each row's eight contiguous eighths (the bytes of a bool tensor are 0 or 1, so every word
    is ≥ 0 and a maximum is nonzero iff one of its words is): ``nonzero`` then reads an (N, V/8) array,
    and only the nonzero groups (words ``v, v + V/8, …, v + 7V/8``) are expanded into their words. A mask
    whose nonzero groups could hold more than ``limit`` words is decided on the words themselves, so the
    answer is always that of ``words.nonzero()``.
    """
    n, n_words = words.shape
    if n_words % 8 == 0:
        eighth = n_words // 8
        groups = words.view(n, 8, eighth).amax(dim=1).nonzero()  # (G, 2): row, group
        if groups.shape[0] * 8 <= limit:
            idx = groups[:, 1, None] + eighth * torch.arange(8, device=words.device)  # (G, 8): their words
            sub = words[groups[:, 0, None], idx].nonzero()  # (W, 2): group, member
            rows, cols = groups[sub[:, 0], 0], idx[sub[:, 0], sub[:, 1]]
            order = torch.argsort(rows * n_words + cols)  # row-major, as words.nonzero() is
            return torch.stack([rows[order], cols[order]], dim=1)
    nzw = words.nonzero()
    return None if nzw.shape[0] > limit else nzw


class _Terms(NamedTuple):
    """What a sweep's two sums are made of besides ``Q`` and ``K`` (arguments of :func:`masked_log_ratio`).

    Attributes:
        mask: the extra positives, ``(N, M)`` bool, or None; the own positive ``(i, col_offset + i)``
            always is one.
        weights: the candidates' weights ``(N, M)`` ≥ 0 (no gradient), or None.
        dcl: leave the positives out of the denominator.
        diagonal: the own positives' exact logits ``(N,)`` (no gradient).
        col_offset: column of row 0's own positive.
        compiled: make InfoNCE's blocks without weights, with the positives as a list of entries, by the
            compiled row softmax (:func:`_softmax_block`); DCL (whose denominator from the softmax would
            be ``1 − π``, cancelling when the positives dominate a row), weights and dense masks keep the
            eager passes.
    """

    mask: Tensor | None
    weights: Tensor | None
    dcl: bool
    diagonal: Tensor
    col_offset: int
    compiled: bool


def _sweep(
    q: Tensor, k: Tensor, terms: _Terms, row_grad: Tensor | None, grads: bool
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """One pass over blocks of rows: ``ℓ`` (N,), and, if ``grads``, ``∂Q``, ``∂K`` for upstream ``row_grad``.

    ``row_grad`` None means every row has upstream gradient 1.

    Raises:
        _RowSumUnderflow: a row's numerator or denominator sum is below ``_MIN_ROW_SUM``.
    """
    mask, weights, dcl, diagonal, col_offset, compiled = terms
    n, m_cols = q.shape[0], k.shape[0]
    sparse = None if mask is None else _mask_entries(mask, col_offset)
    fused = compiled and weights is None and not dcl and (mask is None or sparse is not None)
    softmax = compiled_softmax_rows() if fused else None
    blocks = 1 + (weights is not None) + (mask is not None and sparse is None)  # E, scaled weights, positives
    rows = max(1, _BLOCK_BYTES * (2 if blocks == 1 else 1) // (m_cols * q.element_size()))
    _, diag_shifted, q_op, k_op = tiled._operands(q, k, False, diagonal, col_offset)
    block = min(rows, n)
    buf = q.new_empty(block * m_cols)
    wbuf = q.new_empty(block * m_cols) if weights is not None else None
    # weights scaled by their row maximum (the factor comes back in the log): no product can overflow
    w_inv = None
    if weights is not None:
        w_max = weights.amax(dim=1)
        w_inv = torch.where(w_max > 0, w_max, torch.ones_like(w_max)).reciprocal().unsqueeze(1)
    sparse_bounds: list[int] = []
    if sparse is not None:
        starts = torch.arange(0, n + rows, rows, device=q.device).clamp_(max=n)
        sparse_bounds = torch.searchsorted(sparse[0], starts).tolist()
    pbuf = q.new_empty(block * m_cols) if mask is not None and sparse is None else None
    zero = q.new_zeros(())
    loss = q.new_empty(n)
    dq = torch.empty_like(q) if grads else None
    dk = torch.zeros_like(k) if grads else None
    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        r = i1 - i0
        if softmax is not None:
            ent = None
            if sparse is not None:
                lo, hi = sparse_bounds[i0 // rows], sparse_bounds[i0 // rows + 1]
                ent = (sparse[0][lo:hi] - i0, sparse[1][lo:hi])
            t = torch.mm(q_op[i0:i1], k_op.T, out=buf[: r * m_cols].view(r, m_cols))  # (r, M): S − c
            tiled._fix_diagonal(t, i0, -col_offset, False, diag_shifted)
            g = None if row_grad is None else row_grad[i0:i1]
            out = (dq[i0:i1], dk) if dq is not None and dk is not None else None
            loss[i0:i1] = _softmax_block(t, softmax, ent, col_offset + i0, q[i0:i1], k, g, out)
            continue
        e = tiled._exp_tile(
            q_op, k_op, (i0, i1), (0, m_cols), buf[: r * m_cols].view(r, m_cols), False, diag_shifted, col_offset
        )  # (r, M): exp(S − c), the own positive's entry from ``diagonal``
        if weights is not None:
            assert wbuf is not None and w_inv is not None
            e.mul_(torch.mul(weights[i0:i1], w_inv[i0:i1], out=wbuf[: r * m_cols].view(r, m_cols)))
        own = e.diagonal(col_offset + i0)  # (r,): the own positives' entries of this block
        pe = vals = None
        own_e = own.clone()
        num = own_e.clone()
        if sparse is not None:  # the extra positives as a list of entries: gathered, summed per row
            lo, hi = sparse_bounds[i0 // rows], sparse_bounds[i0 // rows + 1]
            ri, ci = sparse[0][lo:hi] - i0, sparse[1][lo:hi]
            vals = e[ri, ci]
            num.index_add_(0, ri, vals)
            if dcl:
                e.index_put_((ri, ci), zero)
        elif mask is not None:
            assert pbuf is not None
            pe = torch.where(mask[i0:i1], e, zero, out=pbuf[: r * m_cols].view(r, m_cols))  # positives' part
            pe.diagonal(col_offset + i0).copy_(own)
            if dcl:
                e.sub_(pe)  # the negatives' part
            num = pe.sum(dim=1)
        if dcl and pe is None:
            own.zero_()
        den = e.sum(dim=1)
        if not (bool((num >= _MIN_ROW_SUM).all()) and bool((den >= _MIN_ROW_SUM).all())):
            raise _RowSumUnderflow
        loss[i0:i1] = den.log() - num.log()
        if not grads:
            continue
        g = None if row_grad is None else row_grad[i0:i1]
        r_den = den.reciprocal() if g is None else g / den
        assert dq is not None and dk is not None
        if pe is not None:
            r_num = num.reciprocal() if g is None else g / num
            gr = e.mul_(r_den.unsqueeze(1))  # Wd E / den, then − Wn E / num:
            gr.addcmul_(pe, r_num.neg().unsqueeze(1))
            torch.mm(gr, k, out=dq[i0:i1])
            dk.addmm_(gr.T, q[i0:i1])
            continue
        # G = diag(r_den) (E − diag(den/num) P), P the positives' entries: only those entries change, and
        # the row factor r_den scales the (r, D) sides of the GEMMs instead of the (r, M) block
        ratio = den / num  # (r,)
        e.diagonal(col_offset + i0).sub_(own_e * ratio)
        if vals is not None:
            e.index_put_((ri, ci), vals * ratio[ri].neg(), accumulate=True)
        torch.mm(e, k, out=dq[i0:i1]).mul_(r_den.unsqueeze(1))
        dk.addmm_(e.T, q[i0:i1] * r_den.unsqueeze(1))
    return loss, dq, dk


def _softmax_block(
    t: Tensor,
    softmax: Callable[[Tensor], Tensor],
    entries: tuple[Tensor, Tensor] | None,
    diag_col: int,
    q: Tensor,
    k: Tensor,
    row_grad: Tensor | None,
    out: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """InfoNCE's block losses ``−log π`` ``(r,)`` from ``t = S − c`` ``(r, M)`` by the compiled row softmax.

    ``softmax`` overwrites ``t`` by ``P = E / den`` and returns ``den``
    (:mod:`contrastlab.losses.masked_ratio_compiled`); ``π_i = P_i,diag_col+i + Σ P`` over the row's
    ``entries`` (rows, columns of the extra positives, block coordinates). If ``out = (∂Q rows, ∂K)``
    the gradient block ``P − [positive] P / π`` (times ``row_grad``) is formed in ``t`` and sent into
    ``∂Q = G K`` and ``∂K += Gᵀ Q``.

    Raises:
        _RowSumUnderflow: a row's denominator or numerator sum is below ``_MIN_ROW_SUM``.
    """
    den = softmax(t)
    own = t.diagonal(diag_col)  # (r,): a view of the own positives' entries
    pi = own.clone()
    vals = None
    if entries is not None:
        vals = t[entries]
        pi.index_add_(0, entries[0], vals)
    if not (bool((den >= _MIN_ROW_SUM).all()) and bool((den * pi >= _MIN_ROW_SUM).all())):
        raise _RowSumUnderflow
    if out is not None:
        inv = pi.reciprocal()  # (r,)
        own.sub_(own * inv)
        if entries is not None and vals is not None:
            t.index_put_(entries, vals * inv[entries[0]].neg(), accumulate=True)
        dq, dk = out
        if row_grad is None:
            torch.mm(t, k, out=dq)
            dk.addmm_(t.T, q)
        else:
            torch.mm(t, k, out=dq).mul_(row_grad.unsqueeze(1))
            dk.addmm_(t.T, q * row_grad.unsqueeze(1))
    return pi.log().neg()


class _MaskedLogRatio(torch.autograd.Function):
    """``ℓ_i = log den_i − log num_i`` with the gradient made in the forward (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, terms: _Terms) -> Tensor:  # type: ignore[override]
        loss, dq, dk = _sweep(q, k, terms, None, True)
        ctx.terms = terms
        ctx.save_for_backward(q, k, dq, dk)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q, k, dq, dk = ctx.saved_tensors
        if not bool((grad == grad[0]).all()):  # rows weighted unequally: sweep again with their weights
            _, dq, dk = _sweep(q, k, ctx.terms, grad, True)
        else:
            dq, dk = dq * grad[0], dk * grad[0]
        return dq if ctx.needs_input_grad[0] else None, dk if ctx.needs_input_grad[1] else None, None


def _compiled_is_faster(q: Tensor, k: Tensor) -> bool:
    """``compiled="auto"``: whether the compiled row softmax beat the eager ``exp`` and row sum on the first block.

    Measured once per (device, dtype, block rows, power of two of M) and process
    (:func:`contrastlab.losses.compiled_choice.measured_choice`) on ``Q Kᵀ`` of the first block's rows.
    """
    m = k.shape[0]
    r = min(q.shape[0], max(1, 2 * _BLOCK_BYTES // (m * q.element_size())))
    key = ("masked_info_nce", q.device.type, q.dtype, r, max(1, m - 1).bit_length())

    def make() -> tuple[Callable[[], object], Callable[[], object]]:
        block = q[:r].detach() @ k.detach().T  # (r, M)
        work = torch.empty_like(block)
        softmax = compiled_softmax_rows()

        def eager() -> None:
            work.copy_(block).exp_().sum(dim=1)

        def compiled() -> None:
            softmax(work.copy_(block))

        return eager, compiled

    return measured_choice(key, make, device=q.device)


def masked_log_ratio(
    q: Tensor,
    k: Tensor,
    *,
    positive_mask: Tensor | None,
    weights: Tensor | None,
    dcl: bool,
    diagonal: Tensor,
    col_offset: int = 0,
    compiled: bool | str = False,
) -> Tensor | None:
    """Per-row ``log Σ_{C(i)} w e^S − log Σ_{P(i)} w e^S`` of ``S = Q Kᵀ`` in one streamed sweep, or ``None``.

    Shape:
        q: ``(N, D)`` (anchors, scaled by 1/τ); k: ``(M, D)``; positive_mask: ``(N, M)`` bool or None;
        weights: ``(N, M)`` ≥ 0 or None; diagonal: ``(N,)``; returns ``(N,)`` or None.

    Args:
        q: the rows.
        k: the candidates; row i's own positive is candidate ``col_offset + i``.
        positive_mask: extra positives of each row (its own positive always is one).
        weights: per-candidate weights in both sums (no gradient); None means 1.
        dcl: leave the positives out of the denominator (DCL) instead of keeping them (InfoNCE).
        diagonal: exact values of the own positives' logits ``S_i,col_offset+i`` (no gradient flows
            through these values; the gradient of those entries is taken as for every other logit).
        col_offset: column of row 0's own positive.
        compiled: ``True`` makes InfoNCE's blocks (no weights; no dense mask) by the compiled row
            softmax of :mod:`contrastlab.losses.masked_ratio_compiled` (opt-in: the first call of a dtype
            compiles); ``"auto"`` only if it measured faster on the first block, once per process and
            shape (:mod:`contrastlab.losses.compiled_choice`).

    Returns:
        The per-row losses, or ``None`` when a row's numerator or denominator sum falls below
        ``1e-20`` of its shift (an empty set, or an overshooting shift): the caller then takes its
        general path. The forward makes the gradient for equal upstream row gradients (a mean or a
        sum); any other upstream gradient is exact too (one more sweep).

    Memory: up to three blocks of rows (about 8 MiB each; one of about 16 MiB when only E is needed) plus
    O((N + M)·D); no N × M tensor.
    """
    diag = diagonal.detach()
    w = None if weights is None else weights.detach().to(q.dtype)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
    use = compiled is True or (compiled == "auto" and weights is None and not dcl and _compiled_is_faster(q, k))
    terms = _Terms(positive_mask, w, dcl, diag, col_offset, use)
    try:
        if needs_grad:
            out: Tensor = _MaskedLogRatio.apply(q, k, terms)
            return out
        return _sweep(q, k, terms, None, False)[0]
    except _RowSumUnderflow:
        return None
