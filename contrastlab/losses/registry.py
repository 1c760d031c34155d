"""The loss registry: a plain dict from a loss's name to its function (one test runs over every entry).

Every entry is the pure function itself (or a ``functools.partial`` fixing a variant), with its own
signature: the two-view losses (``siglip`` included) take ``(anchor, positive[, negatives])``, ``supcon`` takes
``(embeddings, labels)`` and ``support_corrected`` requires per-anchor negatives ``(N, M, D)``; the
distillation losses ``margin_mse`` and ``distill_kl`` take ``(anchor, positive, negatives, teacher_scores)``
(a teacher's scores of each anchor's positive and negatives). All of them accept ``temperature``,
``reduction`` and ``gather`` keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import Tensor

from contrastlab.losses.debiased import debiased_info_nce
from contrastlab.losses.distill_kl import distill_kl
from contrastlab.losses.hard_negative import hard_negative_info_nce
from contrastlab.losses.info_nce import info_nce
from contrastlab.losses.margin_mse import margin_mse
from contrastlab.losses.nt_xent import nt_xent
from contrastlab.losses.siglip import siglip
from contrastlab.losses.supcon import supcon
from contrastlab.losses.support_corrected import support_corrected_info_nce
from contrastlab.losses.weince import weince

__all__ = ["LOSSES"]

LOSSES: dict[str, Callable[..., Tensor | tuple]] = {
    "info_nce": info_nce,
    "dcl": partial(info_nce, variant="dcl"),
    "nt_xent": nt_xent,
    "supcon": supcon,
    "weince": weince,
    "support_corrected": support_corrected_info_nce,
    "siglip": siglip,
    "debiased": debiased_info_nce,
    "hard_negative": hard_negative_info_nce,
    "margin_mse": margin_mse,
    "distill_kl": distill_kl,
}
"""Loss name → loss function (``info_nce``'s DCL variant under ``"dcl"``)."""
