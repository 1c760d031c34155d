"""Log-sum-exp of a similarity matrix without materialising it: the engine under ``info_nce``/``nt_xent``.

Every InfoNCE-family loss in contrastlab is ``ℓ_i = LSE_j(S_ij) − S_i,pos`` (van den Oord et al. 2018,
eq. 4; Chen et al. 2020, eq. 1) with ``S = Q Kᵀ`` the scaled similarities. The positive term is an
O(N·D) row-wise dot product and is left to autograd; this module computes the expensive part, the
row (and, for CLIP's symmetric loss, column) log-sum-exp of the N × M matrix ``S``, in two ways:

* **dense** (:func:`dense_row_lse`): the N × M buffer is filled one block of rows at a time (a GEMM
  into the block, then ``exp`` in place while the block is still in cache), and only
  ``E = exp(S − c)`` and the row sums ``s`` are kept. The backward is exactly two GEMMs and no
  elementwise pass over the N × M buffer, because the softmax is ``E_ij / s_i`` and the per-row
  factor ``g_i / s_i`` can be applied to the (N, D) operands instead:
  ``∂Q = diag(g/s) E K`` and ``∂K = Eᵀ diag(g/s) Q``.
* **tiled** (:func:`tiled_lse`, :func:`tiled_per_anchor_lse`): the online softmax of Milakov &
  Gimelshein (2018) / FlashAttention (Dao et al. 2022, Alg. 1) on the CPU: the matrix is visited in
  ``block × block`` tiles (per-anchor negatives: ``N × block``), a running maximum and a running sum
  are kept per row (and per column), and the backward recomputes each tile from ``Q`` and ``K``. Peak
  extra memory is one tile plus O((N + M)·D), whatever N and M are.

The row shift ``c_i`` (both paths) is chosen *before* the sweep, so that the subtraction is folded
into the GEMM as an extra coordinate (``[q_i, −c_i]·[k_j, 1] = S_ij − c_i``) and each tile costs one
GEMM, one ``exp`` and one sum. The shift ``c_i = max(S_i,ref, ū_i − 60)`` uses a logit ``S_i,ref`` of
the row (a lower bound of the row maximum) and the Cauchy–Schwarz bound ``ū_i = ‖q_i‖ max_j ‖k_j‖``
(an upper bound), so no term exceeds e⁶⁰ and nothing overflows. A block of rows whose sum comes out
tiny (the shift overshot the true maximum, possible only for very small τ or raw dot products) is
recomputed with the exact running-maximum sweep, so the result never depends on the heuristic.

The per-row gradient factor enters the backward only through the (N, D) operands, and the scaling by
1/τ happens outside (``Q = A/τ``, fused with the L2 normalisation in :func:`normalize_scale`), so
gradients reach a learnable temperature through autograd at O(N·D) cost. The custom backwards are
first-order (``once_differentiable``): double backward through these losses is not supported.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    "DENSE_MEMORY_BUDGET_BYTES",
    "DEFAULT_CHUNK_SIZE",
    "dense_bytes",
    "plan_chunk_size",
    "check_chunk_size",
    "normalize_scale",
    "dense_row_lse",
    "tiled_lse",
    "tiled_lse_rows_cols",
    "tiled_per_anchor_lse",
]

#: ``chunk_size=None`` computes densely when the N × M logits and their gradient (2·N·M·itemsize
#: bytes) fit in this budget, and tiles otherwise. 1 GiB: N = 8,192 in-batch float32 stays dense
#: (512 MiB), N = 16,384 is tiled. A constant, read on every call; pass ``chunk_size`` to override.
DENSE_MEMORY_BUDGET_BYTES = 1 << 30

#: Tile side used when ``chunk_size=None`` decides to tile. A 4096 × 4096 float32 tile is 64 MiB (it
#: stays in the benchmark machine's L3). Smaller, L2-sized tiles were slower there: every tile costs a
#: few multi-threaded ops, and on a 2-core machine shared with other jobs each op's thread
#: synchronisation costs milliseconds (N = 16,384, 2 threads, forward + backward, two interleaved runs:
#: 512 → 11.5×, 1024 → 5.1×, 2048 → 2.5×, 4096 → 1.6× the matmul limit; docs/performance.md).
DEFAULT_CHUNK_SIZE = 4096

# Headroom of the pre-chosen shift: terms are at most e^60, so a row of up to 10^12 terms cannot overflow.
_SHIFT_HEADROOM = 60.0
# A row sum below this (relative to the shift) means the shift overshot; recompute exactly.
_MIN_ROW_SUM = 1e-20
# Rows per block of the dense forward: one block (rows × M floats) of about 16 MiB, exponentiated while in L3.
_DENSE_BLOCK_BYTES = 1 << 24


def dense_bytes(n_rows: int, n_cols: int, itemsize: int) -> int:
    """Bytes of an N × M logit matrix plus its gradient (what a dense loss must hold at its peak)."""
    return 2 * n_rows * n_cols * itemsize


def check_chunk_size(chunk_size: object) -> int | None:
    """Validate ``chunk_size``: ``None`` or an int ≥ 1 (not a bool).

    Raises:
        TypeError: ``chunk_size`` is neither None nor an int.
        ValueError: ``chunk_size`` < 1.
    """
    if chunk_size is None:
        return None
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be None or an int, got {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return chunk_size


def plan_chunk_size(
    n_rows: int,
    n_cols: int,
    itemsize: int,
    chunk_size: int | None,
    memory_budget_bytes: int = DENSE_MEMORY_BUDGET_BYTES,
) -> int | None:
    """Decide between the dense path (return ``None``) and tiling (return the tile side).

    Args:
        n_rows: rows of the logit matrix (anchors; 2N for NT-Xent).
        n_cols: candidates per row (N in-batch, M shared, K per anchor).
        itemsize: bytes per element of the compute dtype.
        chunk_size: the user's choice: ``None`` (automatic) or a forced tile side.
        memory_budget_bytes: the budget the dense logits and their gradient must fit in.

    Returns:
        ``None`` for the dense path, else the tile side (≥ 1).
    """
    chunk_size = check_chunk_size(chunk_size)
    if chunk_size is not None:
        return chunk_size
    if dense_bytes(n_rows, n_cols, itemsize) <= memory_budget_bytes:
        return None
    return DEFAULT_CHUNK_SIZE


def _safe(m: Tensor) -> Tensor:
    """A running maximum usable as a shift: −inf (nothing seen yet) becomes 0."""
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)


def _set_diagonal(tile: Tensor, i0: int, j0: int, value: float | Tensor) -> None:
    """Overwrite the entries of ``tile`` (rows i0.., columns j0..) that lie on the global diagonal.

    ``value`` is a float or a tensor indexed by the global row (its entries for the rows covered are used).
    """
    d = tile.diagonal(offset=i0 - j0)  # entries with column − row = i0 − j0 in tile coordinates
    if d.numel():
        if isinstance(value, Tensor):
            r0 = max(i0, j0)
            d.copy_(value[r0 : r0 + d.numel()])
        else:
            d.fill_(value)


def _fix_diagonal(tile: Tensor, i0: int, j0: int, exclude: bool, diagonal: Tensor | None) -> None:
    """Apply the diagonal rule: −inf when excluded, else the given exact values (if any)."""
    if exclude:
        _set_diagonal(tile, i0, j0, float("-inf"))
    elif diagonal is not None:
        _set_diagonal(tile, i0, j0, diagonal)


# ----------------------------------------------------------------------------------------------------
# Normalisation and 1/τ scaling, fused
# ----------------------------------------------------------------------------------------------------


class _NormalizeScale(torch.autograd.Function):
    """``y = s · x / ‖x‖`` along the last dimension, with a four-pass hand-written backward.

    Autograd's graph of ``l2_normalize(x) * s`` makes about ten passes over the (N, D) data in the
    backward (norm, where, division, product, each with its own backward); this one makes four:
    ``∂x = (s/n) (g − x̂ (x̂·g))`` and ``∂s = Σ_i x̂_i·g_i``. A zero row stays zero and gets the gradient
    ``s·g``, as with :func:`contrastlab.losses._common.l2_normalize`.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: Tensor | float) -> Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        norm = torch.where(norm > 0, norm, torch.ones_like(norm))  # zero rows: divide by 1
        coef = scale / norm
        ctx.save_for_backward(x, norm, coef)
        return x * coef

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor | None]:
        x, norm, coef = ctx.saved_tensors
        xg = (x * g).sum(dim=-1, keepdim=True)  # n · (x̂·g)
        dx = (g * coef).addcmul_(x, -coef * xg / norm.square())
        dscale = (xg / norm).sum() if ctx.needs_input_grad[1] else None
        return dx, dscale


def normalize_scale(x: Tensor, scale: Tensor | float = 1.0) -> Tensor:
    """``scale · x / ‖x‖`` over the last dimension (zero rows stay zero), with a lean backward.

    Shape:
        x: ``(..., D)``; ``scale``: a float or a 0-d tensor (e.g. 1/τ, differentiable); returns ``x``'s shape.
    """
    return _NormalizeScale.apply(x, scale)


# ----------------------------------------------------------------------------------------------------
# Dense path
# ----------------------------------------------------------------------------------------------------


class _DenseRowLSE(torch.autograd.Function):
    """Row LSE of ``Q Kᵀ`` keeping ``exp(S − c)`` for a backward of two GEMMs."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, exclude_diagonal: bool, diagonal: Tensor | None) -> Tensor:
        n, m_cols = q.shape[0], k.shape[0]
        e = q.new_empty(n, m_cols)  # (N, M): filled block of rows by block of rows, exponentiated in cache
        rows = max(1, _DENSE_BLOCK_BYTES // (m_cols * e.element_size()))
        lse, row_sum = _rows_forward(q, k, rows, m_cols, exclude_diagonal, diagonal, out=e)
        ctx.save_for_backward(q, k, e, row_sum)
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        q, k, e, row_sum = ctx.saved_tensors
        r = (grad / row_sum).unsqueeze(1)  # softmax = E / s, so g·softmax = diag(g/s) E
        dq = torch.mm(e, k).mul_(r) if ctx.needs_input_grad[0] else None
        dk = torch.mm(e.T, q * r) if ctx.needs_input_grad[1] else None
        return dq, dk, None, None


def dense_row_lse(q: Tensor, k: Tensor, *, exclude_diagonal: bool = False, diagonal: Tensor | None = None) -> Tensor:
    """``logsumexp(Q Kᵀ, dim=1)``, optionally without the diagonal, with a two-GEMM backward.

    Shape:
        q: ``(N, D)``; k: ``(M, D)`` (``M = N`` when ``exclude_diagonal``); returns ``(N,)``.

    ``diagonal`` (``(N,)``, no gradient) replaces the GEMM's ``S_ii`` by values computed elsewhere, so
    that a loss ``LSE_i − S_ii`` built from the same numbers is exactly ≥ 0 (its backward is unchanged:
    those values are ``q_i·k_i`` up to rounding).

    Memory: one N × M buffer (``exp(S − m)``), kept for the backward; no second N × M tensor is made.
    """
    return _DenseRowLSE.apply(q, k, exclude_diagonal, None if diagonal is None else diagonal.detach())


# ----------------------------------------------------------------------------------------------------
# Tiled path, candidates shared by all rows (in-batch, shared negatives, NT-Xent)
# ----------------------------------------------------------------------------------------------------


def _row_shift(q: Tensor, k: Tensor, exclude_diagonal: bool, diagonal: Tensor | None) -> Tensor:
    """The pre-chosen row shift ``c_i = max(S_i,ref, ū_i − 60)`` (see the module docstring)."""
    n, m_cols = q.shape[0], k.shape[0]
    if diagonal is not None and not exclude_diagonal:
        s_ref = diagonal  # S_ii, given: a logit of each row
    else:
        ref = torch.arange(n, device=q.device) % m_cols
        if exclude_diagonal:
            ref = (ref + 1) % m_cols  # the diagonal is not a candidate; its neighbour is
        s_ref = (q * k[ref]).sum(dim=1)  # a logit of each row: a lower bound of its maximum
    upper = torch.linalg.vector_norm(q, dim=1) * torch.linalg.vector_norm(k, dim=1).max()
    return torch.maximum(s_ref, upper - _SHIFT_HEADROOM)


def _tile(buf: Tensor, out: Tensor | None, i0: int, i1: int, j0: int, j1: int) -> Tensor:
    """Where tile (i0:i1, j0:j1) is written: a slice of ``out`` (dense path) or of a reused buffer."""
    if out is not None:
        return out[i0:i1, j0:j1]
    return buf[: (i1 - i0) * (j1 - j0)].view(i1 - i0, j1 - j0)


def _online_rows(
    q: Tensor,
    k: Tensor,
    i0: int,
    i1: int,
    col_block: int,
    exclude_diagonal: bool,
    diagonal: Tensor | None,
    buf: Tensor,
    out: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Exact running-max LSE sweep of rows i0..i1 over all columns; returns (max, sum).

    With ``out`` (the dense path, one tile spanning all columns) the rows of ``out`` are left holding
    ``exp(S − max)``.
    """
    m_cols = k.shape[0]
    mx = torch.full((i1 - i0,), float("-inf"), dtype=q.dtype, device=q.device)
    sm = torch.zeros_like(mx)
    for j0 in range(0, m_cols, col_block):
        j1 = min(m_cols, j0 + col_block)
        t = torch.mm(q[i0:i1], k[j0:j1].T, out=_tile(buf, out, i0, i1, j0, j1))
        _fix_diagonal(t, i0, j0, exclude_diagonal, diagonal)
        new = torch.maximum(mx, t.amax(dim=1))
        shift = _safe(new)
        sm = sm * torch.exp(mx - shift) + t.sub_(shift.unsqueeze(1)).exp_().sum(dim=1)
        mx = new
    return _safe(mx), sm


def _rows_forward(
    q: Tensor,
    k: Tensor,
    row_block: int,
    col_block: int,
    exclude_diagonal: bool,
    diagonal: Tensor | None,
    out: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Row LSE by tiles with the pre-chosen shift folded into the GEMM; returns ``(lse, sum)``.

    ``sum_i = Σ_j exp(S_ij − c_i)`` for the shift ``c_i`` used (``lse_i = c_i + log sum_i``). With
    ``out`` (N × M, the dense path, ``col_block ≥ M``) the tiles are written there and kept.
    """
    n, m_cols = q.shape[0], k.shape[0]
    shift = _row_shift(q, k, exclude_diagonal, diagonal)
    diag_shifted = None if diagonal is None else diagonal - shift  # the tiles hold S − c
    ones = torch.ones(m_cols, 1, dtype=q.dtype, device=q.device)
    k_aug = torch.cat([k, ones], dim=1)  # (M, D+1): [k_j, 1]
    q_aug = torch.cat([q, -shift.unsqueeze(1)], dim=1)  # (N, D+1): [q_i, -c_i]·[k_j, 1] = S_ij - c_i
    buf = q.new_empty(0 if out is not None else min(row_block, n) * min(col_block, m_cols))
    lse = torch.empty(n, dtype=q.dtype, device=q.device)
    row_sum = torch.empty_like(lse)
    for i0 in range(0, n, row_block):
        i1 = min(n, i0 + row_block)
        sm = torch.zeros(i1 - i0, dtype=q.dtype, device=q.device)
        for j0 in range(0, m_cols, col_block):
            j1 = min(m_cols, j0 + col_block)
            t = torch.mm(q_aug[i0:i1], k_aug[j0:j1].T, out=_tile(buf, out, i0, i1, j0, j1))
            _fix_diagonal(t, i0, j0, exclude_diagonal, diag_shifted)
            sm += t.exp_().sum(dim=1)
        mx = shift[i0:i1]
        if not bool((sm >= _MIN_ROW_SUM).all()):  # the shift overshot this block's maximum: redo exactly
            mx, sm = _online_rows(q, k, i0, i1, col_block, exclude_diagonal, diagonal, buf, out)
        lse[i0:i1] = mx + sm.log()
        row_sum[i0:i1] = sm
    return lse, row_sum


def _rows_cols_forward(
    q: Tensor, k: Tensor, block: int, exclude_diagonal: bool, diagonal: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Row and column LSE in one sweep (CLIP's symmetric loss): running max/sum per row and per column."""
    n, m_cols = q.shape[0], k.shape[0]
    row_lse = torch.empty(n, dtype=q.dtype, device=q.device)
    col_mx = torch.full((m_cols,), float("-inf"), dtype=q.dtype, device=q.device)
    col_sm = torch.zeros_like(col_mx)
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        mx = torch.full((i1 - i0,), float("-inf"), dtype=q.dtype, device=q.device)
        sm = torch.zeros_like(mx)
        for j0 in range(0, m_cols, block):
            j1 = min(m_cols, j0 + block)
            t = torch.mm(q[i0:i1], k[j0:j1].T)
            _fix_diagonal(t, i0, j0, exclude_diagonal, diagonal)
            new_r = torch.maximum(mx, t.amax(dim=1))
            new_c = torch.maximum(col_mx[j0:j1], t.amax(dim=0))
            sr, sc = _safe(new_r), _safe(new_c)
            sm = sm * torch.exp(mx - sr) + torch.exp(t - sr.unsqueeze(1)).sum(dim=1)
            col_sm[j0:j1] = col_sm[j0:j1] * torch.exp(col_mx[j0:j1] - sc) + t.sub_(sc).exp_().sum(dim=0)
            mx = new_r
            col_mx[j0:j1] = new_c
        row_lse[i0:i1] = _safe(mx) + sm.log()
    return row_lse, _safe(col_mx) + col_sm.log()


class _TiledLSE(torch.autograd.Function):
    """Row (and optionally column) LSE of ``Q Kᵀ`` by tiles; the backward recomputes the tiles."""

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, block: int, exclude_diagonal: bool, columns: bool, diagonal: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        if columns:
            row_lse, col_lse = _rows_cols_forward(q, k, block, exclude_diagonal, diagonal)
        else:
            row_lse = _rows_forward(q, k, block, block, exclude_diagonal, diagonal)[0]
            col_lse = q.new_empty(0)
        ctx.block, ctx.exclude_diagonal, ctx.columns = block, exclude_diagonal, columns
        ctx.save_for_backward(q, k, row_lse, col_lse)
        return row_lse, col_lse

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_row: Tensor, g_col: Tensor) -> tuple[Tensor, Tensor, None, None, None, None]:
        q, k, row_lse, col_lse = ctx.saved_tensors
        block, excl = ctx.block, ctx.exclude_diagonal
        n, m_cols = q.shape[0], k.shape[0]
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        if not ctx.columns:
            # ∂S_ij = g_i softmax_ij: the row factor g_i is applied to the (·, D) operands, not the tile.
            ones = torch.ones(m_cols, 1, dtype=q.dtype, device=q.device)
            k_aug = torch.cat([k, ones], dim=1)
            gq = q * g_row.unsqueeze(1)
            q_aug = torch.cat([q, -row_lse.unsqueeze(1)], dim=1)  # [q_i, -lse_i]·[k_j, 1] = S_ij - lse_i
            buf = q.new_empty(min(block, n) * min(block, m_cols))
            for i0 in range(0, n, block):
                i1 = min(n, i0 + block)
                acc = dq[i0:i1]
                for j0 in range(0, m_cols, block):
                    j1 = min(m_cols, j0 + block)
                    p = torch.mm(q_aug[i0:i1], k_aug[j0:j1].T, out=_tile(buf, None, i0, i1, j0, j1))
                    p.exp_()  # the softmax tile, entries <= 1
                    if excl:
                        _set_diagonal(p, i0, j0, 0.0)
                    acc.addmm_(p, k[j0:j1])
                    dk[j0:j1].addmm_(p.T, gq[i0:i1])
                acc.mul_(g_row[i0:i1, None])
            return dq, dk, None, None, None, None
        for i0 in range(0, n, block):
            i1 = min(n, i0 + block)
            for j0 in range(0, m_cols, block):
                j1 = min(m_cols, j0 + block)
                s = torch.mm(q[i0:i1], k[j0:j1].T)
                w = torch.exp(s - row_lse[i0:i1, None]).mul_(g_row[i0:i1, None])
                w.add_(s.sub_(col_lse[j0:j1]).exp_().mul_(g_col[j0:j1]))
                if excl:
                    _set_diagonal(w, i0, j0, 0.0)
                dq[i0:i1].addmm_(w, k[j0:j1])
                dk[j0:j1].addmm_(w.T, q[i0:i1])
        return dq, dk, None, None, None, None


def tiled_lse(
    q: Tensor, k: Tensor, *, block: int, exclude_diagonal: bool = False, diagonal: Tensor | None = None
) -> Tensor:
    """Row log-sum-exp of ``Q Kᵀ`` in ``block × block`` tiles.

    Shape:
        q: ``(N, D)``; k: ``(M, D)`` (``M = N`` when ``exclude_diagonal``); returns ``(N,)``.

    Args:
        q: queries (anchors already scaled by 1/τ).
        k: candidates.
        block: tile side (≥ 1); any value works, it need not divide N or M.
        exclude_diagonal: leave ``S_ii`` out (DCL, NT-Xent).
        diagonal: optional exact values of ``S_ii`` (``(N,)``, no gradient), as in :func:`dense_row_lse`.

    Memory: one tile (``block × block``) plus O((N + M)·D), in the forward and in the backward.
    """
    block = check_chunk_size(block) or DEFAULT_CHUNK_SIZE
    diag = None if diagonal is None else diagonal.detach()
    return _TiledLSE.apply(q, k, block, exclude_diagonal, False, diag)[0]


def tiled_lse_rows_cols(
    q: Tensor, k: Tensor, *, block: int, exclude_diagonal: bool = False, diagonal: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Row and column log-sum-exp of ``Q Kᵀ`` (CLIP's two directions), streamed in one sweep of tiles.

    Shape:
        q: ``(N, D)``; k: ``(N, D)``; returns ``(row_lse (N,), col_lse (N,))``.

    Arguments as in :func:`tiled_lse`. Memory: one tile plus O(N·D).
    """
    block = check_chunk_size(block) or DEFAULT_CHUNK_SIZE
    diag = None if diagonal is None else diagonal.detach()
    row_lse, col_lse = _TiledLSE.apply(q, k, block, exclude_diagonal, True, diag)
    return row_lse, col_lse


# ----------------------------------------------------------------------------------------------------
# Tiled path, per-anchor negatives (N, K, D)
# ----------------------------------------------------------------------------------------------------


def _per_anchor_tile(q: Tensor, negs: Tensor, j0: int, j1: int) -> Tensor:
    """``S[:, j0:j1]`` with ``S_ik = <negs_ik, q_i>``: a batched matrix-vector product, shape (N, j1−j0)."""
    return torch.bmm(negs[:, j0:j1], q.unsqueeze(2)).squeeze(2)


class _TiledPerAnchorLSE(torch.autograd.Function):
    """Row LSE of per-anchor logits ``S_ik = <q_i, n_ik>``, streamed over blocks of K."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, negs: Tensor, block: int) -> Tensor:
        n, k_count = negs.shape[0], negs.shape[1]
        mx = torch.full((n,), float("-inf"), dtype=q.dtype, device=q.device)
        sm = torch.zeros_like(mx)
        for j0 in range(0, k_count, block):
            t = _per_anchor_tile(q, negs, j0, min(k_count, j0 + block))
            new = torch.maximum(mx, t.amax(dim=1))
            shift = _safe(new)
            sm = sm * torch.exp(mx - shift) + t.sub_(shift.unsqueeze(1)).exp_().sum(dim=1)
            mx = new
        lse = _safe(mx) + sm.log()
        ctx.block = block
        ctx.save_for_backward(q, negs, lse)
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor | None, None]:
        q, negs, lse = ctx.saved_tensors
        k_count = negs.shape[1]
        dq = torch.zeros_like(q)
        dnegs = torch.empty_like(negs) if ctx.needs_input_grad[1] else None
        for j0 in range(0, k_count, ctx.block):
            j1 = min(k_count, j0 + ctx.block)
            w = _per_anchor_tile(q, negs, j0, j1).sub_(lse.unsqueeze(1)).exp_().mul_(grad.unsqueeze(1))
            dq += torch.bmm(w.unsqueeze(1), negs[:, j0:j1]).squeeze(1)
            if dnegs is not None:
                torch.mul(w.unsqueeze(2), q.unsqueeze(1), out=dnegs[:, j0:j1])
        return dq, dnegs, None


def tiled_per_anchor_lse(q: Tensor, negs: Tensor, *, block: int) -> Tensor:
    """``logsumexp_k <q_i, negs_ik>`` streamed over blocks of ``block`` negatives.

    Shape:
        q: ``(N, D)``; negs: ``(N, K, D)``; returns ``(N,)``.

    Memory: one ``N × block`` tile (plus the gradient of ``negs``, which has the input's size).
    """
    block = check_chunk_size(block) or DEFAULT_CHUNK_SIZE
    return _TiledPerAnchorLSE.apply(q, negs, block)
