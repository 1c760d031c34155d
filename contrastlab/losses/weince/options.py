"""WEINCE's options, built and validated once: the loss function, its module and the gathered case share them.

Erol et al. 2026 (arXiv 2606.00262), §2.3 and the official code's hyperparameters; see
:mod:`contrastlab.losses.weince.loss` for what each one does in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contrastlab._checks import check_choice, check_int, check_positive_float, check_real

__all__ = ["BETA_MODES", "GlobalBetaConfig", "WEINCEOptions"]

BETA_MODES = ("per_anchor", "one", "global_ema")


@dataclass(frozen=True)
class GlobalBetaConfig:
    """The official code's batch-level Weibit shape β_t (``auto_weib_beta=True``), §2.3 last line.

    Used by ``beta_mode="global_ema"`` and by the top-M auxiliary Weibit term.
    """

    tail_frac: float = 0.05
    """fraction of all the batch's negative shortfalls in the global tail fit"""
    min_tail: int = 1024
    """minimum number of tail points of the global fit"""
    r2_min: float = 0.85
    """a batch's β̂ is accepted only when its fit has R² ≥ r2_min"""
    beta_min: float = 0.5
    """lower clamp of an accepted β̂"""
    beta_max: float = 16.0
    """upper clamp of an accepted β̂"""
    momentum: float = 0.9
    """EMA momentum: β_t ← momentum·β_{t−1} + (1 − momentum)·clamp(β̂)"""
    init: float = 4.0
    """β_0, the EMA's starting value (the code's ``weib_beta``)"""

    def __post_init__(self) -> None:
        if not 0.0 < check_positive_float("tail_frac", self.tail_frac) <= 1.0:
            raise ValueError(f"tail_frac must be in (0, 1], got {self.tail_frac}")
        check_int("min_tail", self.min_tail, 1)
        if not 0.0 <= check_positive_float("r2_min", self.r2_min, allow_zero=True) <= 1.0:
            raise ValueError(f"r2_min must be in [0, 1], got {self.r2_min}")
        check_positive_float("beta_min", self.beta_min)
        if check_positive_float("beta_max", self.beta_max) < self.beta_min:
            raise ValueError(f"beta_max must be >= beta_min = {self.beta_min}, got {self.beta_max}")
        if not 0.0 <= check_positive_float("momentum", self.momentum, allow_zero=True) < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        check_positive_float("init", self.init)


@dataclass(frozen=True)
class WEINCEOptions:
    """Every hyperparameter of WEINCE's statistics and loss (validated at construction).

    The defaults are the paper's text (Erol et al. 2026, §2.3); the official code's choices are
    ``beta_mode="one"`` and ``aux_top_m=50``.
    """

    beta_mode: str = "per_anchor"
    """β_i of the Weibit logit: "per_anchor" (β̂_i, the paper's text), "one" (the code) or "global_ema"
    (the code's batch-level EMA β_t)"""
    q: float = 0.2
    """quantile level in [0, 1] of the cap-proximity pivot ρ_0"""
    tail_frac: float = 0.1
    """fraction in (0, 1] of each anchor's negatives in its tail fit"""
    min_tail: int = 32
    """minimum tail size (then clipped to [10, K], as the code does)"""
    kappa_rho: float = 10.0
    """steepness κ_ρ ≥ 0 of the cap-proximity gate"""
    kappa_aic: float = 1.0
    """steepness κ_AIC ≥ 0 of the Weibull-vs-Gumbel gate"""
    margin: float = 2.0
    """ΔAIC margin m (the paper's grid: 0, 2, 6)"""
    eps: float = 1e-6
    """s is clamped to ≤ 1 − eps in −log(1 − s) and shortfalls are floored at eps; in (0, 1)"""
    fixed_lambda: float | None = None
    """if set, λ_i ≡ this value in [0, 1] instead of the statistics (0: NT-Xent / InfoNCE exactly)"""
    aux_top_m: int = 0
    """M > 0 adds the reproduction scripts' auxiliary top-M terms (they use 50)"""
    aux_weight: float = 0.5
    """weight ≥ 0 of each auxiliary term (the scripts' 0.5)"""
    global_beta: GlobalBetaConfig = field(default_factory=GlobalBetaConfig)
    """configuration of the global β_t (beta_mode="global_ema" and the top-M terms)"""

    @property
    def needs_global_beta(self) -> bool:
        """Whether the global β_t (and its EMA state) is needed: ``beta_mode="global_ema"`` or ``aux_top_m > 0``."""
        return self.beta_mode == "global_ema" or self.aux_top_m > 0

    def __post_init__(self) -> None:
        check_choice("beta_mode", self.beta_mode, BETA_MODES)
        if not 0.0 <= check_positive_float("q", self.q, allow_zero=True) <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {self.q}")
        if not 0.0 < check_positive_float("tail_frac", self.tail_frac) <= 1.0:
            raise ValueError(f"tail_frac must be in (0, 1], got {self.tail_frac}")
        check_int("min_tail", self.min_tail, 1)
        check_positive_float("kappa_rho", self.kappa_rho, allow_zero=True)
        check_positive_float("kappa_aic", self.kappa_aic, allow_zero=True)
        check_real("margin", self.margin)
        if not 0.0 < check_positive_float("eps", self.eps) < 1.0:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")
        if (
            self.fixed_lambda is not None
            and not 0.0 <= check_positive_float("fixed_lambda", self.fixed_lambda, allow_zero=True) <= 1.0
        ):
            raise ValueError(f"fixed_lambda must be None or in [0, 1], got {self.fixed_lambda}")
        check_int("aux_top_m", self.aux_top_m, 0)
        check_positive_float("aux_weight", self.aux_weight, allow_zero=True)
        if not isinstance(self.global_beta, GlobalBetaConfig):
            raise TypeError(f"global_beta must be a GlobalBetaConfig, got {type(self.global_beta).__name__}")
