"""The masked InfoNCE sweep's element-wise pass compiled by PyTorch's compiler: optional, the eager pass the reference.

Khosla et al. 2020 (arXiv 2004.11362, eq. 3, "sum inside the log"); :mod:`contrastlab.losses.masked_ratio`
streams blocks of ``S − c`` and, per block, makes ``E = exp(S − c)`` in place and its row sums ``den``:
two eager passes over the block (the ``exp`` reads and writes it, the sum reads it again from the
last-level cache). Here one compiled function makes the row softmax ``P = E / den`` in place, and
``den``. ``torch.compile`` (Inductor) emits it as one loop over the rows that, per row, sums ``exp``
and then, while the row is in the first-level cache, writes ``exp / den`` over it: the block is read
from the last-level cache once and written once, at the price of a second ``exp`` per entry. (A
compiled ``exp`` in place followed by the row sum is emitted as two loops over the whole block, the
eager passes again, plus a block-sized temporary; that form is not used.)

With ``P`` in the block the masked loss and its gradient need no row factors: with
``π_i = Σ_{j∈P(i)} P_ij`` (the own positive and the extra positives), ``ℓ_i = −log π_i`` and
``∂ℓ_i/∂S_ij = P_ij − [j ∈ P(i)] P_ij / π_i``: the block is changed only at the positives' entries and
goes as it is into the two gradient GEMMs.

The compiled pass is taken only when asked for (``info_nce(..., positive_mask=..., compiled=True)``); the
first call of each dtype compiles (seconds on the benchmark machine, paid by that call). The compiled
function is built on first use and cached for the process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

__all__: list[str] = []


def _softmax_rows_(t: Tensor) -> Tensor:
    """Overwrite ``t`` ``(r, M)`` by its row softmax and return the row sums ``Σ_j exp(t_ij)`` ``(r,)``.

    No shift is taken: ``t`` is ``S − c``, already shifted by the sweep.
    """
    den = torch.exp(t).sum(dim=1, keepdim=True)
    t.copy_(torch.exp(t) / den)
    return den.squeeze(1)


@functools.cache
def compiled_softmax_rows() -> Callable[[Tensor], Tensor]:
    """:func:`_softmax_rows_` compiled with dynamic shapes (a ragged last block needs no recompile)."""
    return torch.compile(_softmax_rows_, dynamic=True)
