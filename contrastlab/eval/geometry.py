"""Embedding geometry in one namespace: alignment/uniformity, tail statistics, and norm dynamics.

One import path for the geometry tools; each lives in its own file (one concept per file) and is re-exported
here:

- :func:`alignment`, :func:`uniformity` (Wang & Isola 2020) — :mod:`contrastlab.losses.alignment_uniformity`;
- peaks-over-threshold / Weibull-vs-Gumbel tail diagnostics (WEINCE §2) — :mod:`contrastlab.eval.tails`;
- norm trajectories, squared-gradient heat, the discrete-step norm recursion and its equilibrium,
  Spearman correlations with bootstrap intervals (Su, Ren & Veitch) — :mod:`contrastlab.eval.norms`.
"""

from contrastlab.eval.norms import (
    ItemHeatMeter,
    NormTrace,
    ScaleInvariantProbe,
    equilibrium_sq_norm,
    norm_correlations,
    one_step_residual,
    predicted_sq_norm,
    spearman,
    spearman_bootstrap,
)
from contrastlab.eval.tails import (
    POTFit,
    TailReport,
    isotropic_xi,
    negative_cosines,
    plot_tail_diagnostics,
    pot_fit,
    qq_points,
    tail_diagnostics,
)
from contrastlab.losses.alignment_uniformity import alignment, uniformity

__all__ = [
    "alignment",
    "uniformity",
    "POTFit",
    "TailReport",
    "isotropic_xi",
    "negative_cosines",
    "plot_tail_diagnostics",
    "pot_fit",
    "qq_points",
    "tail_diagnostics",
    "ItemHeatMeter",
    "NormTrace",
    "ScaleInvariantProbe",
    "equilibrium_sq_norm",
    "norm_correlations",
    "one_step_residual",
    "predicted_sq_norm",
    "spearman",
    "spearman_bootstrap",
]
