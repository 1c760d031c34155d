"""The argument descriptions that several losses share, written once and composed into their docstrings.

A loss's docstring names a shared description by its key in braces (``{temperature}``, one of
:data:`ARGS`' keys); :func:`shared_docs` puts the text in when the function or class is defined, so
``help()`` and the rendered documentation show every argument in full. A description's
continuation lines are indented as the argument's own. Braces around anything else
(``e^{S_ij}``) are left as they are.
"""

from __future__ import annotations

import re
from typing import TypeVar

__all__ = ["ARGS", "shared_docs"]

_T = TypeVar("_T")

ARGS: dict[str, str] = {
    "anchor": "anchor embeddings. Shape ``(N, D)``.",
    "positive": "positive embeddings, row i paired with anchor i. Shape ``(N, D)``.",
    "negatives": (
        "``None`` for in-batch negatives, shared negatives of shape ``(M, D)``, or\n"
        "per-anchor negatives of shape ``(N, K, D)``."
    ),
    "simclr_anchor": "anchor embeddings (with ``simclr=True``: the first views). Shape ``(N, D)``.",
    "simclr_positive": "positive embeddings, row i paired with anchor i (the second views). Shape ``(N, D)``.",
    "simclr_negatives": (
        "``None`` for in-batch negatives (N − 1 per anchor, or 2N − 2 per view with\n"
        "``simclr=True``), shared ``(M, D)`` or per-anchor ``(N, K, D)`` negatives."
    ),
    "simclr": (
        "SimCLR's arrangement of the 2N views (``negatives`` must be None); the loss is over 2N\n"
        'rows, ``reduction="none"`` giving ``(2N,)`` with the first views\' rows first.'
    ),
    "gather_candidates": (
        "under torch.distributed, contrast this rank's anchors with every rank's candidates\n"
        "(in-batch views and shared negatives, exact gradients; per-anchor negatives stay local); N is\n"
        "then the global count."
    ),
    "z_a": "first view's embeddings. Shape ``(N, D)``.",
    "z_b": "second view's embeddings, row i the partner of ``z_a[i]``. Shape ``(N, D)``.",
    "temperature": "τ > 0: a float, a 0-d tensor, or a module returning one (``LearnableTemperature``).",
    "normalize": "L2-normalise rows first (cosine similarity); ``False`` uses raw dot products.",
    "reductions": '``"mean"``, ``"sum"`` or ``"none"``',
    "gather_share": (
        "The result is this rank's share of the global loss (:func:`contrastlab.distributed.share`);\n"
        "an invalid input on any rank raises the same error on every rank. In one process the gather\n"
        "does nothing."
    ),
    "tiled_int": "an int forces the tiled kernel with that tile side",
    "compiled_auto": (
        '``"auto"``: only if that measured faster on the first block, once per process and shape\n'
        "(:mod:`contrastlab.losses.compiled_choice`). Opt-in: the first call of each dtype pays the\n"
        "compile; the same numbers to rounding."
    ),
    "query": "the queries' embeddings. Shape ``(N, D)``.",
    "relevant": "their relevant documents' embeddings. Shape ``(N, D)``.",
    "documents": "K documents per anchor. Shape ``(N, K, D)`` (or ``(N, D)`` for K = 1).",
    "teacher_scores": "the teacher's scores of each anchor's positive, then its negatives. Shape ``(N, 1 + K)``.",
    "gather_none": "accepted for the registry's uniform signature; the loss has no cross-row term to gather.",
    "tau_plus": (
        "τ⁺ in [0, 1), the class prior of the debiasing: the probability that a drawn negative shares the\n"
        "anchor's class (0: no debiasing; the papers use 0.01–0.1, their code defaults to 0.1)."
    ),
    "chunk_size_kept": (
        "``None`` chooses the dense path while its kept logits fit\n"
        ":data:`contrastlab.losses.tiled.DENSE_MEMORY_BUDGET_BYTES`, the tiled kernel beyond;\n"
        "{tiled_int}. All paths give the same numbers."
    ),
    "per_row_loss": 'The loss, float32 (float64 for float64 inputs); ``(R,)`` per-row losses for ``"none"``.',
}
"""Key → the shared description (lines broken with ``\\n``, indented where it is put)."""

_KEY = re.compile(r"^(?P<indent> *)(?P<entry>\w+: )?.*?\{(?P<key>" + "|".join(ARGS) + r")\}", re.MULTILINE)


def _fill(doc: str) -> str:
    """``doc`` with every ``{key}`` of :data:`ARGS` replaced by its text.

    A description's continuation lines take the indentation of the line it is put in, four spaces deeper
    when that line opens an argument's entry (``name: ...``), as Google style indents them.
    """
    while match := _KEY.search(doc):
        indent = match["indent"] + ("    " if match["entry"] else "")
        text = ARGS[match["key"]].replace("\n", "\n" + indent)
        start, end = match.span("key")
        doc = doc[: start - 1] + text + doc[end + 1 :]
    return doc


def shared_docs(obj: _T) -> _T:
    """Decorator: put :data:`ARGS`' shared descriptions into ``obj``'s docstring (see the module's)."""
    if obj.__doc__ is not None:  # None under python -OO
        obj.__doc__ = _fill(obj.__doc__)
    return obj
