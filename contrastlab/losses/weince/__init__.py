"""WEINCE (Erol et al. 2026, arXiv 2606.00262): InfoNCE with an anchor-wise extreme-value (Weibit) correction.

One concept in six files; :mod:`~contrastlab.losses.weince.loss` explains the loss and its paths.

* ``loss.py``: :func:`weince`, :func:`weince_with`, :class:`WEINCELoss`, :class:`WEINCEStats`, and the
  choice between the fused, streamed and explicit-negative paths;
* ``options.py``: :class:`WEINCEOptions` and :class:`GlobalBetaConfig`, every hyperparameter validated once;
* ``tail.py``: the stop-gradient §2.3 statistics (per-anchor Weibull/Gumbel fits, λ_i, the global β_t);
* ``kernels.py``: the fused single-block kernel and the mixed cross-entropy, with hand-written backwards;
* ``stream.py``: the streamed kernel over blocks of anchors (memory linear in N);
* ``compiled.py``: the streamed block's element-wise work compiled by ``torch.compile`` (opt-in).
"""

from contrastlab.losses.weince.loss import WEINCELoss, WEINCEStats, weince, weince_with
from contrastlab.losses.weince.options import BETA_MODES, GlobalBetaConfig, WEINCEOptions
from contrastlab.losses.weince.tail import (
    ENDPOINT_SHORTFALL,
    AnchorTailStats,
    anchor_tail_stats,
    global_tail_beta,
    global_tail_beta_pooled,
    rowwise_ols,
    tail_size,
    update_beta_ema,
)

__all__ = [
    "weince",
    "weince_with",
    "WEINCELoss",
    "WEINCEOptions",
    "WEINCEStats",
    "AnchorTailStats",
    "GlobalBetaConfig",
    "anchor_tail_stats",
    "global_tail_beta",
    "global_tail_beta_pooled",
    "update_beta_ema",
    "tail_size",
    "rowwise_ols",
    "BETA_MODES",
    "ENDPOINT_SHORTFALL",
]
