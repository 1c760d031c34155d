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
  ``∂Q = diag(g/s) E K`` and ``∂K = Eᵀ diag(g/s) Q``. When every row will get the same upstream
  gradient (a mean or sum of the row losses; see :func:`keeps_logits`), ``grad_ahead=True`` runs
  those two GEMMs in the forward, on each block of rows while it is still in cache, so that the N × M
  buffer is never allocated: the three GEMMs of forward + backward then run back to back on cached
  data (the fastest path; ``benchmarks/loss_speed.py``).
* **tiled** (:func:`tiled_lse`, :func:`tiled_per_anchor_lse`): the online softmax of Milakov &
  Gimelshein (2018) / FlashAttention (Dao et al. 2022, Alg. 1) on the CPU: the matrix is visited in
  ``block × block`` tiles (per-anchor negatives: ``N × block``), a running maximum and a running sum
  are kept per row (and per column), and the backward recomputes each tile from ``Q`` and ``K``. Peak
  extra memory is one tile plus O((N + M)·D), whatever N and M are.

The row shift ``c_i`` (both paths) is chosen *before* the sweep, so that the subtraction is folded
into the GEMM as an extra coordinate (``[q_i, −c_i]·[k_j, 1] = S_ij − c_i``) and each tile costs one
GEMM, one ``exp`` and one sum; when every logit is known to lie in [−60, 60] (unit vectors and
τ ≥ 1/60, the usual case) no shift is needed at all and the GEMM is the plain ``Q Kᵀ``. The shift
``c_i = max(S_i,ref, ū_i − 60)`` uses a logit ``S_i,ref`` of the row (a lower bound of the row
maximum) and the Cauchy–Schwarz bound ``ū_i = ‖q_i‖ max_j ‖k_j‖``
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

from contrastlab._checks import check_bool, check_int
from contrastlab.losses.stripe_calibration import calibrated_chunk_size

__all__ = [
    "DENSE_MEMORY_BUDGET_BYTES",
    "DEFAULT_CHUNK_SIZE",
    "dense_bytes",
    "plan_chunk_size",
    "stripe_rows",
    "check_chunk_size",
    "normalize_scale",
    "dense_row_lse",
    "keeps_logits",
    "tiled_lse",
    "tiled_lse_rows_cols",
    "tiled_per_anchor_lse",
    "row_lse",
    "per_anchor_lse",
]

#: When the dense path has to keep the N × M logits (per-row losses with a backward), ``chunk_size=None``
#: computes densely while they and their gradient (2·N·M·itemsize bytes) fit in this budget, and tiles
#: otherwise. 1 GiB: N = 8,192 in-batch float32 stays dense (512 MiB), N = 16,384 is tiled. The
#: streamed dense path (a mean or sum) does not need it. A constant, read on every call.
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
# The streamed dense path is chosen while a block holds at least this many rows (M ≤ 65,536 in float32):
# thinner blocks make thin GEMMs and re-read ∂K (M × D) once per block. Measured, 2 threads, D = 128
# (docs/performance.md): N = 65,536 (64 rows) 1.24× the matmul limit against the tiled kernel's 1.32×;
# N = 131,072 (32 rows) 1.54× against 1.34×.
_MIN_STREAM_ROWS = 64
# With ``like`` the planner measures the stripe height where a dense block would hold fewer rows than this
# (M > 16,384 in float32): there a forward + backward takes seconds, so a calibration of about a second,
# once per process, is worth its cost; below, every stripe height measured alike within the noise
# (docs/performance.md) and the dense blocks are kept.
_CALIBRATE_BELOW_ROWS = 256


def dense_bytes(n_rows: int, n_cols: int, itemsize: int) -> int:
    """Bytes of an N × M logit matrix plus its gradient (what a dense loss must hold at its peak)."""
    return 2 * n_rows * n_cols * itemsize


def check_chunk_size(chunk_size: object) -> int | None:
    """Validate ``chunk_size``: ``None`` or an int ≥ 1 (not a bool).

    Raises:
        TypeError: ``chunk_size`` is neither None nor an int.
        ValueError: ``chunk_size`` < 1.
    """
    return None if chunk_size is None else check_int("chunk_size", chunk_size, 1)


def plan_chunk_size(
    n_rows: int,
    n_cols: int,
    itemsize: int,
    chunk_size: int | None,
    memory_budget_bytes: int = DENSE_MEMORY_BUDGET_BYTES,
    *,
    keeps_logits: bool = True,
    like: Tensor | None = None,
) -> int | None:
    """Decide between the dense path (return ``None``) and tiling (return the tile side).

    Args:
        n_rows: rows of the logit matrix (anchors; 2N for NT-Xent).
        n_cols: candidates per row (N in-batch, M shared, K per anchor).
        itemsize: bytes per element of the compute dtype.
        chunk_size: the user's choice: ``None`` (automatic) or a forced tile side.
        memory_budget_bytes: the budget the dense logits and their gradient must fit in.
        keeps_logits: whether the dense path would keep the N × M logits (:func:`keeps_logits`).
            When it streams blocks of rows instead, its memory is linear in N + M, and it is chosen
            whatever the budget as long as a 16 MiB block holds at least 64 rows (M ≤ 65,536 in
            float32); beyond, the tiled kernel is faster (``docs/performance.md``).
        like: the candidates ``(M, D)`` (their D, dtype and device), for a streamed caller
            (``keeps_logits`` False) that runs tiles as full-width stripes (:func:`stripe_rows`): where a
            16 MiB block would hold fewer than 256 rows (M > 16,384 in float32), the tile side is then
            measured (:func:`contrastlab.losses.stripe_calibration.calibrated_chunk_size`, once per
            process) instead of taken from the fixed rule, and the stripes are used whenever they are
            taller than the dense block. ``None`` keeps the fixed rule.

    Returns:
        ``None`` for the dense path, else the tile side (≥ 1).
    """
    chunk_size = check_chunk_size(chunk_size)
    if chunk_size is not None:
        return chunk_size
    fits = dense_bytes(n_rows, n_cols, itemsize) <= memory_budget_bytes
    if keeps_logits:
        return None if fits else DEFAULT_CHUNK_SIZE
    dense_rows = _DENSE_BLOCK_BYTES // (n_cols * itemsize)
    if like is None or dense_rows >= _CALIBRATE_BELOW_ROWS:
        return None if dense_rows >= _MIN_STREAM_ROWS or fits else DEFAULT_CHUNK_SIZE
    side = calibrated_chunk_size(n_cols, like.shape[-1], like.dtype, like.device)
    rows = stripe_rows(side, n_cols)
    if rows is not None and rows > dense_rows:  # measured: taller stripes than the dense block pay
        return side
    return None if dense_rows >= _MIN_STREAM_ROWS or fits else side


def stripe_rows(chunk_size: int, n_cols: int) -> int | None:
    """Rows of a full-width stripe holding at most one ``chunk_size × chunk_size`` tile, or ``None``.

    A tiled loss whose rows all get the same upstream gradient (a mean or a sum) runs the streamed
    dense sweep (:func:`dense_row_lse` with ``grad_ahead``) in stripes of ``chunk_size² // M`` rows
    instead of square tiles: the same memory bound (one tile), and three GEMMs instead of four, since
    a stripe spans every column, so its softmax is final and the gradient is made while it is in cache
    (square tiles must recompute S in the backward). ``None`` when the stripe would hold fewer than 64
    rows (thin GEMMs, and ∂K re-read once per stripe): then the square tiles are used.
    """
    rows = chunk_size * chunk_size // max(1, n_cols)
    return rows if rows >= _MIN_STREAM_ROWS else None


def _check_offset(col_offset: object) -> int:
    """Validate ``col_offset``: an int ≥ 0 (not a bool)."""
    return check_int("col_offset", col_offset, 0)


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


def keeps_logits(reduction: str, *inputs: Tensor) -> bool:
    """Whether the dense path has to keep the N × M logits for a backward with unequal row gradients.

    True when a backward can run (grad mode on and an input requires grad) and the rows' losses are
    not reduced by a mean or a sum (``reduction="none"``), so rows may get different upstream
    gradients. Otherwise :func:`dense_row_lse` streams blocks of rows in O(block + (N + M)·D) memory:
    forward only when no backward can run, or with ``grad_ahead=True`` (every row gets the same
    gradient). Callers whose loss weights the rows' LSE unequally (InfoNCE's ``logaddexp`` of the
    positive with shared negatives) pass ``reduction="none"``.
    """
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    return needs_grad and reduction == "none"


def _dense_rows(q: Tensor, k: Tensor) -> int:
    """Rows per block of the dense sweep: one block (rows × M elements) of about ``_DENSE_BLOCK_BYTES``."""
    return max(1, _DENSE_BLOCK_BYTES // (k.shape[0] * q.element_size()))


class _DenseRowLSE(torch.autograd.Function):
    """Row LSE of ``Q Kᵀ``: one N × M buffer kept for a two-GEMM backward, or the gradient made ahead.

    With ``grad_ahead`` the forward also computes the gradient for an all-ones upstream gradient,
    ``∂Q = P K`` and ``∂K = Pᵀ Q`` (``P`` the row softmax), and keeps only those (N, D) and (M, D)
    results; the backward scales them when the upstream gradient is the same for every row (what a
    mean or sum of ``LSE_i − S_i,pos`` sends) and otherwise recomputes the exact gradient.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        exclude_diagonal: bool,
        diagonal: Tensor | None,
        col_offset: int = 0,
        grad_ahead: bool = False,
        bias: Tensor | None = None,
        rows: int | None = None,
    ) -> Tensor:
        rows = _dense_rows(q, k) if rows is None else rows
        ctx.rows = rows
        ctx.args = (exclude_diagonal, diagonal, col_offset, bias)
        ctx.grad_ahead = grad_ahead
        if grad_ahead:
            lse, dq, dk = _dense_grad_ahead(q, k, rows, exclude_diagonal, diagonal, col_offset, bias)
            ctx.save_for_backward(q, k, dq, dk)
            return lse
        e = q.new_empty(q.shape[0], k.shape[0])  # (N, M): filled block of rows by block of rows, exp'd in cache
        lse, row_sum = _rows_forward(
            q, k, rows, k.shape[0], exclude_diagonal, diagonal, out=e, col_offset=col_offset, bias=bias
        )
        ctx.save_for_backward(q, k, e, row_sum)
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None, None, None, None]:
        if ctx.grad_ahead:
            q, k, dq1, dk1 = ctx.saved_tensors
            if bool((grad == grad[0]).all()):  # the same for every row: scale the gradient made ahead
                dq = dq1 * grad[0] if ctx.needs_input_grad[0] else None
                dk = dk1 * grad[0] if ctx.needs_input_grad[1] else None
                return dq, dk, None, None, None, None, None, None
            exclude_diagonal, diagonal, col_offset, bias = ctx.args  # rows weighted unequally: recompute E
            e = q.new_empty(q.shape[0], k.shape[0])
            rows = ctx.rows
            _, row_sum = _rows_forward(q, k, rows, k.shape[0], exclude_diagonal, diagonal, e, col_offset, bias)
        else:
            q, k, e, row_sum = ctx.saved_tensors
        r = (grad / row_sum).unsqueeze(1)  # softmax = E / s, so g·softmax = diag(g/s) E
        dq = torch.mm(e, k).mul_(r) if ctx.needs_input_grad[0] else None
        dk = torch.mm(e.T, q * r) if ctx.needs_input_grad[1] else None
        return dq, dk, None, None, None, None, None, None


def dense_row_lse(
    q: Tensor,
    k: Tensor,
    *,
    exclude_diagonal: bool = False,
    diagonal: Tensor | None = None,
    col_offset: int = 0,
    grad_ahead: bool = False,
    bias: Tensor | None = None,
    rows: int | None = None,
) -> Tensor:
    """``logsumexp(Q Kᵀ + B, dim=1)``, optionally without the diagonal, with a two-GEMM backward.

    Shape:
        q: ``(N, D)``; k: ``(M, D)`` (``M = N`` when ``exclude_diagonal``); returns ``(N,)``.

    ``diagonal`` (``(N,)``, no gradient) replaces the GEMM's ``S_ii`` by values computed elsewhere, so
    that a loss ``LSE_i − S_ii`` built from the same numbers is exactly ≥ 0 (its backward is unchanged:
    those values are ``q_i·k_i`` up to rounding).

    ``col_offset`` moves the "diagonal" to the entries ``(i, col_offset + i)`` (a rank's local rows
    against gathered candidates, :mod:`contrastlab.distributed`); 0 is the square case.

    When no backward can run (grad mode off, or neither input requires grad) the rows are streamed
    through one reused block and only the LSE is returned.

    ``grad_ahead=True`` is for a caller that will call backward and send every row the same upstream
    gradient (a mean or a sum of ``LSE_i − S_i,pos``; :func:`keeps_logits`). The forward then also
    computes ``∂Q = P K`` and ``∂K = Pᵀ Q`` while each block of rows (about 16 MiB) is still in cache,
    so the three GEMMs of forward + backward run back to back on cached data and no N × M tensor is
    ever allocated (a fresh N × M buffer per step costs, in page faults alone, about a quarter of a
    GEMM on the benchmark machine); the backward is a scaling. An upstream gradient that differs
    between rows is still exact: the backward then recomputes ``E`` (one more GEMM). Without a
    backward, ``grad_ahead`` wastes two GEMMs.

    ``bias`` (optional, ``(N, M)``, entries ≤ 0 or −inf, no gradient) is added to every logit before the
    exponential: row i's sum becomes Σ_j exp(B_ij) exp(S_ij), per-candidate weights exp(B_ij) (−inf
    leaves a candidate out). Entries ≤ 0 keep the pre-chosen shift safe (see the module docstring).

    ``rows`` sets the rows per block of the streamed sweep (default: blocks of about 16 MiB); a tiled
    caller passes :func:`stripe_rows` so that a block holds no more than one of its tiles.

    Memory: one N × M buffer (``exp(S − c)``), kept for the backward; without a backward or with
    ``grad_ahead``, one block of rows (about 16 MiB, or ``rows`` × M) plus O((N + M)·D) (plus ``bias``,
    the caller's).
    """
    check_bool("grad_ahead", grad_ahead)
    col_offset = _check_offset(col_offset)
    diag = None if diagonal is None else diagonal.detach()
    b = None if bias is None else bias.detach()
    if rows is not None:
        rows = check_chunk_size(rows)
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):  # forward only: stream the rows
        rows = _dense_rows(q, k) if rows is None else rows
        return _rows_forward(q, k, rows, k.shape[0], exclude_diagonal, diag, col_offset=col_offset, bias=b)[0]
    return _DenseRowLSE.apply(q, k, exclude_diagonal, diag, col_offset, grad_ahead, b, rows)


# ----------------------------------------------------------------------------------------------------
# Tiled path, candidates shared by all rows (in-batch, shared negatives, NT-Xent)
# ----------------------------------------------------------------------------------------------------


def _row_shift(
    q: Tensor,
    k: Tensor,
    exclude_diagonal: bool,
    diagonal: Tensor | None,
    col_offset: int = 0,
    bias: Tensor | None = None,
) -> Tensor | None:
    """The pre-chosen row shift ``c_i = max(S_i,ref, ū_i − 60)``, or ``None`` when no shift is needed.

    ``None`` when every logit lies in [−60, 60] (``max_i ū_i ≤ 60``, e.g. unit vectors with τ ≥ 1/60):
    ``exp(S_ij)`` can then neither overflow nor lose precision in float32, and leaving the GEMM
    unshifted saves a (D+1)-th coordinate. See the module docstring.
    """
    n, m_cols = q.shape[0], k.shape[0]
    upper = torch.linalg.vector_norm(q, dim=1) * torch.linalg.vector_norm(k, dim=1).max()
    if float(upper.max()) <= _SHIFT_HEADROOM:
        return None
    if diagonal is not None and not exclude_diagonal:
        s_ref = diagonal  # S_i,offset+i, given: a logit of each row
    else:
        ref = (torch.arange(n, device=q.device) + col_offset) % m_cols
        if exclude_diagonal:
            ref = (ref + 1) % m_cols  # the diagonal is not a candidate; its neighbour is
        s_ref = (q * k[ref]).sum(dim=1)  # a logit of each row: a lower bound of its maximum
    if bias is not None:  # a biased logit of each row (bias ≤ 0: the upper bound ū still holds)
        rows = torch.arange(n, device=q.device)
        ref = (rows + col_offset) % m_cols if diagonal is not None and not exclude_diagonal else ref
        s_ref = s_ref + bias[rows, ref]
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
    col_offset: int = 0,
    bias: Tensor | None = None,
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
        _fix_diagonal(t, i0, j0 - col_offset, exclude_diagonal, diagonal)
        if bias is not None:
            t.add_(bias[i0:i1, j0:j1])
        new = torch.maximum(mx, t.amax(dim=1))
        shift = _safe(new)
        sm = sm * torch.exp(mx - shift) + t.sub_(shift.unsqueeze(1)).exp_().sum(dim=1)
        mx = new
    return _safe(mx), sm


def _operands(
    q: Tensor, k: Tensor, exclude_diagonal: bool, diagonal: Tensor | None, col_offset: int, bias: Tensor | None = None
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """The pre-chosen row shift folded into the GEMM's operands: ``(c, diagonal − c, Q', K')``.

    ``Q' K'ᵀ = S − c``: with a shift, ``Q' = [Q, −c]`` and ``K' = [K, 1]`` (an extra coordinate,
    ``[q_i, −c_i]·[k_j, 1] = S_ij − c_i``, as fast as the D-dimensional GEMM, where a bias or a separate
    subtraction costs a pass); without one (:func:`_row_shift` returns ``None``), ``Q, K`` and ``c = 0``.
    """
    shift = _row_shift(q, k, exclude_diagonal, diagonal, col_offset, bias)
    if shift is None:
        return q.new_zeros(q.shape[0]), diagonal, q, k
    diag_shifted = None if diagonal is None else diagonal - shift  # the tiles hold S − c
    ones = torch.ones(k.shape[0], 1, dtype=q.dtype, device=q.device)
    return shift, diag_shifted, torch.cat([q, -shift.unsqueeze(1)], dim=1), torch.cat([k, ones], dim=1)


def _exp_tile(
    q_op: Tensor,
    k_op: Tensor,
    rows: tuple[int, int],
    cols: tuple[int, int],
    tile: Tensor,
    exclude_diagonal: bool,
    diag_shifted: Tensor | None,
    col_offset: int,
    bias: Tensor | None = None,
) -> Tensor:
    """Write ``exp(S + B − c)`` of rows ``rows[0]:rows[1]``, columns ``cols[0]:cols[1]`` into ``tile``; return it.

    ``q_op``, ``k_op`` are the operands of :func:`_operands`: one GEMM, the diagonal rule, one ``exp``.
    """
    (i0, i1), (j0, j1) = rows, cols
    t = torch.mm(q_op[i0:i1], k_op[j0:j1].T, out=tile)
    _fix_diagonal(t, i0, j0 - col_offset, exclude_diagonal, diag_shifted)
    if bias is not None:
        t.add_(bias[i0:i1, j0:j1])
    return t.exp_()


def _rows_forward(
    q: Tensor,
    k: Tensor,
    row_block: int,
    col_block: int,
    exclude_diagonal: bool,
    diagonal: Tensor | None,
    out: Tensor | None = None,
    col_offset: int = 0,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Row LSE by tiles with the pre-chosen shift folded into the GEMM; returns ``(lse, sum)``.

    ``sum_i = Σ_j exp(S_ij − c_i)`` for the shift ``c_i`` used (``lse_i = c_i + log sum_i``). With
    ``out`` (N × M, the dense path, ``col_block ≥ M``) the tiles are written there and kept.
    """
    n, m_cols = q.shape[0], k.shape[0]
    shift, diag_shifted, q_op, k_op = _operands(q, k, exclude_diagonal, diagonal, col_offset, bias)
    buf = q.new_empty(0 if out is not None else min(row_block, n) * min(col_block, m_cols))
    lse = torch.empty(n, dtype=q.dtype, device=q.device)
    row_sum = torch.empty_like(lse)
    for i0 in range(0, n, row_block):
        i1 = min(n, i0 + row_block)
        sm = torch.zeros(i1 - i0, dtype=q.dtype, device=q.device)
        for j0 in range(0, m_cols, col_block):
            j1 = min(m_cols, j0 + col_block)
            tile = _tile(buf, out, i0, i1, j0, j1)
            t = _exp_tile(q_op, k_op, (i0, i1), (j0, j1), tile, exclude_diagonal, diag_shifted, col_offset, bias)
            sm += t.sum(dim=1)
        mx = shift[i0:i1]
        if not bool((sm >= _MIN_ROW_SUM).all()):  # the shift overshot this block's maximum: redo exactly
            mx, sm = _online_rows(q, k, i0, i1, col_block, exclude_diagonal, diagonal, buf, out, col_offset, bias)
        lse[i0:i1] = mx + sm.log()
        row_sum[i0:i1] = sm
    return lse, row_sum


def _dense_grad_ahead(
    q: Tensor,
    k: Tensor,
    rows: int,
    exclude_diagonal: bool,
    diagonal: Tensor | None,
    col_offset: int,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Row LSE and the gradients ``P K``, ``Pᵀ Q`` for an all-ones upstream gradient, a block of rows at a time.

    Each block of ``E = exp(S − c)`` (``rows × M``, in one reused buffer) is summed and used by the
    next two GEMMs while it is still in cache: ``∂Q = diag(1/s) E K`` and ``∂K += Eᵀ diag(1/s) Q``.
    Returns ``(lse (N,), ∂Q (N, D), ∂K (M, D))``.
    """
    n, m_cols = q.shape[0], k.shape[0]
    shift, diag_shifted, q_op, k_op = _operands(q, k, exclude_diagonal, diagonal, col_offset, bias)
    buf = q.new_empty(min(rows, n) * m_cols)  # one block of rows, reused: the N × M logits never exist
    lse = torch.empty(n, dtype=q.dtype, device=q.device)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)  # the first block writes it, the others accumulate
    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        tile = _tile(buf, None, i0, i1, 0, m_cols)
        e = _exp_tile(q_op, k_op, (i0, i1), (0, m_cols), tile, exclude_diagonal, diag_shifted, col_offset, bias)
        sm, mx = e.sum(dim=1), shift[i0:i1]
        if not bool((sm >= _MIN_ROW_SUM).all()):  # the shift overshot this block's maximum: redo exactly
            mx, sm = _online_rows(q, k, i0, i1, m_cols, exclude_diagonal, diagonal, buf, None, col_offset, bias)
        lse[i0:i1] = mx + sm.log()
        r = sm.reciprocal().unsqueeze(1)  # softmax = E / s: the row factor goes on the (·, D) operands
        torch.mm(e, k, out=dq[i0:i1]).mul_(r)
        if i0 == 0:
            torch.mm(e.T, q[i0:i1] * r, out=dk)
        else:
            dk.addmm_(e.T, q[i0:i1] * r)
    return lse, dq, dk


def _rows_cols_forward(
    q: Tensor, k: Tensor, block: int, exclude_diagonal: bool, diagonal: Tensor | None, col_offset: int = 0
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
            _fix_diagonal(t, i0, j0 - col_offset, exclude_diagonal, diagonal)
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
        ctx: Any,
        q: Tensor,
        k: Tensor,
        block: int,
        exclude_diagonal: bool,
        columns: bool,
        diagonal: Tensor | None,
        col_offset: int = 0,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        if columns:
            row_lse, col_lse = _rows_cols_forward(q, k, block, exclude_diagonal, diagonal, col_offset)
        else:
            row_lse = _rows_forward(q, k, block, block, exclude_diagonal, diagonal, col_offset=col_offset, bias=bias)[0]
            col_lse = q.new_empty(0)
        ctx.block, ctx.exclude_diagonal, ctx.columns = block, exclude_diagonal, columns
        ctx.col_offset, ctx.bias = col_offset, bias
        ctx.save_for_backward(q, k, row_lse, col_lse)
        return row_lse, col_lse

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_row: Tensor, g_col: Tensor) -> tuple[Tensor, Tensor, None, None, None, None, None, None]:
        q, k, row_lse, col_lse = ctx.saved_tensors
        block, excl, off, bias = ctx.block, ctx.exclude_diagonal, ctx.col_offset, ctx.bias
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
                    if bias is not None:
                        p.add_(bias[i0:i1, j0:j1])
                    p.exp_()  # the softmax tile, entries <= 1
                    if excl:
                        _set_diagonal(p, i0, j0 - off, 0.0)
                    acc.addmm_(p, k[j0:j1])
                    dk[j0:j1].addmm_(p.T, gq[i0:i1])
                acc.mul_(g_row[i0:i1, None])
            return dq, dk, None, None, None, None, None, None
        for i0 in range(0, n, block):
            i1 = min(n, i0 + block)
            for j0 in range(0, m_cols, block):
                j1 = min(m_cols, j0 + block)
                s = torch.mm(q[i0:i1], k[j0:j1].T)
                w = torch.exp(s - row_lse[i0:i1, None]).mul_(g_row[i0:i1, None])
                w.add_(s.sub_(col_lse[j0:j1]).exp_().mul_(g_col[j0:j1]))
                if excl:
                    _set_diagonal(w, i0, j0 - off, 0.0)
                dq[i0:i1].addmm_(w, k[j0:j1])
                dk[j0:j1].addmm_(w.T, q[i0:i1])
        return dq, dk, None, None, None, None, None, None


def tiled_lse(
    q: Tensor,
    k: Tensor,
    *,
    block: int,
    exclude_diagonal: bool = False,
    diagonal: Tensor | None = None,
    col_offset: int = 0,
    bias: Tensor | None = None,
) -> Tensor:
    """Row log-sum-exp of ``Q Kᵀ`` (plus ``bias``) in ``block × block`` tiles.

    Shape:
        q: ``(N, D)``; k: ``(M, D)`` (``M = N`` when ``exclude_diagonal``); returns ``(N,)``.

    Args:
        q: queries (anchors already scaled by 1/τ).
        k: candidates.
        block: tile side (≥ 1); any value works, it need not divide N or M.
        exclude_diagonal: leave ``S_ii`` out (DCL, NT-Xent).
        diagonal: optional exact values of ``S_ii`` (``(N,)``, no gradient), as in :func:`dense_row_lse`.
        col_offset: the "diagonal" is the entries ``(i, col_offset + i)`` (default 0: square logits).
            Under torch.distributed a rank's local anchors sit at rows ``offset..offset + n`` of the
            gathered candidates, so their positives/selves are at ``col_offset = offset``.
        bias: optional ``(N, M)`` log-weights added to the logits, as in :func:`dense_row_lse`.

    Memory: one tile (``block × block``) plus O((N + M)·D), in the forward and in the backward.
    """
    block = check_chunk_size(block) or DEFAULT_CHUNK_SIZE
    diag = None if diagonal is None else diagonal.detach()
    b = None if bias is None else bias.detach()
    return _TiledLSE.apply(q, k, block, exclude_diagonal, False, diag, _check_offset(col_offset), b)[0]


def tiled_lse_rows_cols(
    q: Tensor,
    k: Tensor,
    *,
    block: int,
    exclude_diagonal: bool = False,
    diagonal: Tensor | None = None,
    col_offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """Row and column log-sum-exp of ``Q Kᵀ`` (CLIP's two directions), streamed in one sweep of tiles.

    Shape:
        q: ``(N, D)``; k: ``(N, D)``; returns ``(row_lse (N,), col_lse (N,))``.

    Arguments as in :func:`tiled_lse`. Memory: one tile plus O(N·D).
    """
    block = check_chunk_size(block) or DEFAULT_CHUNK_SIZE
    diag = None if diagonal is None else diagonal.detach()
    row_lse, col_lse = _TiledLSE.apply(q, k, block, exclude_diagonal, True, diag, _check_offset(col_offset))
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


def row_lse(
    q: Tensor,
    k: Tensor,
    block: int | None,
    *,
    exclude_diagonal: bool = False,
    diagonal: Tensor | None = None,
    col_offset: int = 0,
    grad_ahead: bool = False,
    bias: Tensor | None = None,
    rows: int | None = None,
) -> Tensor:
    """Row log-sum-exp of ``Q Kᵀ`` (plus ``bias``) on the path a planner chose (:func:`plan_chunk_size`).

    :func:`dense_row_lse` when ``block`` is None (``grad_ahead`` and ``rows`` are its), else
    :func:`tiled_lse` with tiles of side ``block``; the other arguments as theirs. Shapes: q ``(N, D)``,
    k ``(M, D)``; returns ``(N,)``.
    """
    if block is None:
        return dense_row_lse(
            q, k, exclude_diagonal=exclude_diagonal, diagonal=diagonal, col_offset=col_offset, grad_ahead=grad_ahead,
            bias=bias, rows=rows,
        )  # fmt: skip
    return tiled_lse(
        q, k, block=block, exclude_diagonal=exclude_diagonal, diagonal=diagonal, col_offset=col_offset, bias=bias
    )


def per_anchor_lse(q: Tensor, negs: Tensor, block: int | None) -> Tensor:
    """Row log-sum-exp of each anchor against its own negatives, dense or tiled as a planner chose.

    One batched GEMM and ``logsumexp`` when ``block`` is None, else :func:`tiled_per_anchor_lse` with
    tiles of ``block`` negatives. Shapes: q ``(N, D)``, negs ``(N, K, D)``; returns ``(N,)``.
    """
    if block is None:
        return torch.logsumexp(torch.bmm(negs, q.unsqueeze(2)).squeeze(2), dim=1)  # (N, K, D) x (N, D, 1) → (N, K)
    return tiled_per_anchor_lse(q, negs, block=block)
