"""Embedding norms under a scale-invariant loss: trajectories, gradient "heat", the discrete recursion.

Mechanism (after Su, Ren & Veitch 2026, arXiv 2606.30625, and Draganov et al., ICML 2025,
arXiv 2502.09252, Cor. 3.3). If a loss
``L`` depends on a vector ``z`` only through ``u = z/‖z‖`` (cosine InfoNCE does, for every embedding row
and also for the last linear layer of an encoder, jointly with its bias), then Euler's theorem for a
function homogeneous of degree 0 gives ``⟨z, ∇_z L⟩ = 0``, and ``∇_z L = G/‖z‖`` with
``G = (I − uuᵀ)∇_u L`` the gradient on the sphere. One plain SGD step ``z' = (1 − ηλ) z − η ∇_z L``
(coupled weight decay ``λ``) is therefore, **exactly**,

    ‖z_{t+1}‖² = (1 − ηλ)² ‖z_t‖² + η² ‖G_t‖² / ‖z_t‖²                         (R1)

so the norm only grows without decay (gradient *flow* freezes it; the growth is a discreteness effect), and
with decay it has the equilibrium ``R⁴ = η² E‖G‖² / (1 − (1 − ηλ)²) ≈ η E‖G‖² / (2λ)``. ``E‖G‖²`` is
per *step*, so an item absent from a batch contributes 0: the norm accumulates frequency × per-occurrence
squared gradient, the "heat".

Several occurrences of one row in a batch (as anchor and as candidate, or repeated anchors): the loss is
still a function of ``u_i`` alone through every occurrence, so (R1) holds for the **total** gradient of
the row, ``G_t = Σ_k G_t^{(k)}``; the heat is ``‖Σ_k G^{(k)}‖²``, not ``Σ_k ‖G^{(k)}‖²``.

Adam and momentum break (R1): their update is not parallel to the current gradient, so it has a radial
component. :class:`ScaleInvariantProbe` measures the actual update ``Δ_t`` and splits
``‖z_{t+1}‖² − ‖z_t‖² = ‖Δ_t‖² + 2⟨z_t, Δ_t⟩`` into its tangential and radial parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats
from torch import Tensor, nn

from contrastlab._checks import check_positive_float

__all__ = [
    "NormTrace",
    "ScaleInvariantProbe",
    "ItemHeatMeter",
    "predicted_sq_norm",
    "one_step_residual",
    "equilibrium_sq_norm",
    "spearman",
    "spearman_bootstrap",
    "norm_correlations",
]


@dataclass(frozen=True)
class NormTrace:
    """Per-step record of a set of vectors (rows) trained under a scale-invariant loss.

    Attributes:
        sq_norm: ``(T + 1, n)`` squared norms ``‖z_t‖²``, ``t = 0..T`` (row 0 before the first step).
        grad_sq: ``(T, n)`` squared norm of the loss gradient ``‖∇_z L‖²`` used at step ``t`` (float64).
        update_sq: ``(T, n)`` squared norm of the actual update ``‖Δ_t‖² = ‖z_{t+1} − z_t‖²``.
        radial: ``(T, n)`` radial part of the growth, ``2⟨z_t, Δ_t⟩``.
        cos_grad: ``(T, n)`` ``⟨z_t, ∇L⟩ / (‖z_t‖‖∇L‖)`` (0 for a scale-invariant loss; NaN if ∇L = 0).
    """

    sq_norm: np.ndarray
    grad_sq: np.ndarray
    update_sq: np.ndarray
    radial: np.ndarray
    cos_grad: np.ndarray

    @property
    def sphere_grad_sq(self) -> np.ndarray:
        """``(T, n)`` ``‖G_t‖² = ‖z_t‖² ‖∇_z L‖²``, the squared gradient on the unit sphere."""
        return self.sq_norm[:-1] * self.grad_sq

    @property
    def heat(self) -> np.ndarray:
        """``(n,)`` accumulated heat ``Σ_t ‖G_t‖²``."""
        return self.sphere_grad_sq.sum(axis=0)


def _flat(params: Sequence[Tensor], rows: bool) -> Tensor:
    if rows:
        (p,) = params
        return p.detach().reshape(p.shape[0], -1).to(torch.float64)
    return torch.cat([p.detach().reshape(-1) for p in params]).to(torch.float64)[None, :]


def _flat_grad(params: Sequence[Tensor], rows: bool) -> Tensor:
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    return _flat([g.to_dense() if g.is_sparse else g for g in grads], rows)


class ScaleInvariantProbe:
    """A ``fit(..., on_step=...)`` probe that records :class:`NormTrace` for one parameter group.

    Two modes: ``rows=True`` with one ``(n, D)`` parameter (an ``nn.Embedding`` table: each row is a
    scale-invariant vector); ``rows=False`` treats the concatenation of ``params`` as one vector
    (``n = 1``; e.g. the last linear layer's weight and bias of an encoder trained with a cosine loss).

    The probe must be called right after each optimiser step, while ``p.grad`` still holds the gradient of
    that step (``fit`` calls ``on_step`` there). It keeps a float64 copy of the previous parameters.

    Args:
        get_params: ``model -> [parameters]``, evaluated at every call (so it survives ``model.to``).
        model: the model before training (for ``z_0``).
        rows: per-row mode (see above).
    """

    def __init__(self, get_params: Callable[[nn.Module], Sequence[Tensor]], model: nn.Module, *, rows: bool) -> None:
        params = list(get_params(model))
        if rows and len(params) != 1:
            raise ValueError(f"get_params must return one (n, D) parameter when rows=True, got {len(params)}")
        if not params:
            raise ValueError("get_params returned no parameters")
        self.get_params, self.rows = get_params, rows
        self._prev = _flat(params, rows).clone()
        self._sq: list[Tensor] = [(self._prev**2).sum(1)]
        self._grad_sq: list[Tensor] = []
        self._update_sq: list[Tensor] = []
        self._radial: list[Tensor] = []
        self._cos: list[Tensor] = []

    def __call__(self, model: nn.Module, step: int, loss: Tensor | None = None) -> None:
        """Record step ``step`` (called after the optimiser step)."""
        params = list(self.get_params(model))
        z_new = _flat(params, self.rows)
        g = _flat_grad(params, self.rows)
        z_old = self._prev
        delta = z_new - z_old
        gn = g.norm(dim=1)
        zn = z_old.norm(dim=1)
        self._sq.append((z_new**2).sum(1))
        self._grad_sq.append((g**2).sum(1))
        self._update_sq.append((delta**2).sum(1))
        self._radial.append(2.0 * (z_old * delta).sum(1))
        self._cos.append((z_old * g).sum(1) / (zn * gn))
        self._prev = z_new.clone()

    def trace(self) -> NormTrace:
        """The record so far as numpy float64 arrays."""

        def stack(xs: list[Tensor], width: int) -> np.ndarray:
            return torch.stack(xs).numpy() if xs else np.zeros((0, width))

        n = self._sq[0].shape[0]
        return NormTrace(
            sq_norm=stack(self._sq, n),
            grad_sq=stack(self._grad_sq, n),
            update_sq=stack(self._update_sq, n),
            radial=stack(self._radial, n),
            cos_grad=stack(self._cos, n),
        )


class ItemHeatMeter:
    """Accumulates the per-item heat ``Σ_t ‖G_t‖²`` of encoder outputs, for items seen through views.

    Call :meth:`attach` inside the loss function on the embedding tensor (before normalisation) and the
    item id of each row; a tensor hook adds ``‖z_r‖² ‖∂L/∂z_r‖²`` (the sphere gradient of the row) into
    its item's total when ``backward`` runs. Unlike a free table, different views of one item are different
    vectors, so this is a per-view sum, not the squared total gradient of a shared row.

    Args:
        n_items: number of items.
    """

    def __init__(self, n_items: int) -> None:
        if isinstance(n_items, bool) or not isinstance(n_items, int) or n_items < 1:
            raise ValueError(f"n_items must be a positive int, got {n_items!r}")
        self.heat = torch.zeros(n_items, dtype=torch.float64)
        self.count = torch.zeros(n_items, dtype=torch.int64)

    def attach(self, z: Tensor, items: Tensor) -> None:
        """Register the hook on ``z`` ``(B, D)`` whose rows belong to ``items`` ``(B,)``."""
        if z.ndim != 2 or items.shape != (z.shape[0],):
            raise ValueError(f"items must have shape ({z.shape[0]},) matching z's rows, got {tuple(items.shape)}")
        sq = (z.detach().double() ** 2).sum(1)
        idx = items.detach().cpu()

        def hook(grad: Tensor) -> None:
            g = (grad.detach().double() ** 2).sum(1) * sq
            self.heat.index_add_(0, idx, g.cpu())
            self.count.index_add_(0, idx, torch.ones_like(idx))

        if z.requires_grad:
            z.register_hook(hook)


def predicted_sq_norm(
    initial_sq_norm: np.ndarray, sphere_grad_sq: np.ndarray, *, lr: float, weight_decay: float = 0.0
) -> np.ndarray:
    """Iterate the recursion (R1) from ``‖z_0‖²`` with given per-step sphere gradients.

    ``R²_{t+1} = (1 − ηλ)² R²_t + η² ‖G_t‖² / R²_t`` — the prediction uses its own ``R_t``, not the
    measured one, so errors would compound; for plain SGD on a free embedding it matches to rounding.

    Args:
        initial_sq_norm: ``(n,)`` ``‖z_0‖²``.
        sphere_grad_sq: ``(T, n)`` ``‖G_t‖²`` (e.g. :attr:`NormTrace.sphere_grad_sq`).
        lr: step size ``η``.
        weight_decay: coupled decay ``λ`` (SGD's ``weight_decay``).

    Returns:
        ``(T + 1, n)`` predicted squared norms.
    """
    eta = check_positive_float("lr", lr)
    lam = check_positive_float("weight_decay", weight_decay, allow_zero=True)
    r0 = np.asarray(initial_sq_norm, dtype=np.float64)
    gsq = np.asarray(sphere_grad_sq, dtype=np.float64)
    if gsq.ndim != 2 or gsq.shape[1:] != r0.shape:
        raise ValueError(f"sphere_grad_sq must have shape (T, {r0.shape[0]}), got {gsq.shape}")
    shrink = (1.0 - eta * lam) ** 2
    out = np.empty((gsq.shape[0] + 1, r0.shape[0]), dtype=np.float64)
    out[0] = r0
    for t in range(gsq.shape[0]):
        out[t + 1] = shrink * out[t] + eta**2 * gsq[t] / out[t]
    return out


def one_step_residual(trace: NormTrace, *, lr: float, weight_decay: float = 0.0) -> np.ndarray:
    """Relative error of (R1) applied to the *measured* ``‖z_t‖`` and gradient, per step and row.

    Returns:
        ``(T, n)`` ``|‖z_{t+1}‖² − (1 − ηλ)²‖z_t‖² − η²‖∇L_t‖²| / ‖z_{t+1}‖²``
        (``η²‖G_t‖²/‖z_t‖² = η²‖∇L_t‖²``).
    """
    eta = check_positive_float("lr", lr)
    lam = check_positive_float("weight_decay", weight_decay, allow_zero=True)
    pred = (1.0 - eta * lam) ** 2 * trace.sq_norm[:-1] + eta**2 * trace.grad_sq
    return np.abs(trace.sq_norm[1:] - pred) / trace.sq_norm[1:]


def equilibrium_sq_norm(
    mean_sphere_grad_sq: np.ndarray | float, *, lr: float, weight_decay: float, exact: bool = True
) -> np.ndarray:
    """Fixed point ``R²`` of (R1) for a constant per-step ``E‖G‖²`` and decay ``λ > 0``.

    ``R⁴ = η² E‖G‖² / (1 − (1 − ηλ)²)`` (``exact``), or the small-``ηλ`` form ``R⁴ ≈ η E‖G‖² / (2λ)``.
    (The "bi-quadratic" ``R² = (D + √(D² + 2V²))/2`` that a third-party note attributes to
    Su, Ren & Veitch 2026, arXiv 2606.30625, reduces to the
    small-``ηλ`` form at zero drift ``D`` when ``V² = η E‖G‖²/λ``; its ``D`` and ``V`` are unverified.)

    Args:
        mean_sphere_grad_sq: ``E‖G‖²`` per step (absent steps count as 0), scalar or ``(n,)``.
        lr: ``η``.
        weight_decay: ``λ`` (> 0; without decay there is no equilibrium).
        exact: the discrete fixed point instead of the small-``ηλ`` approximation.

    Returns:
        ``R²`` with the shape of ``mean_sphere_grad_sq``.
    """
    eta = check_positive_float("lr", lr)
    lam = check_positive_float("weight_decay", weight_decay)
    v = np.asarray(mean_sphere_grad_sq, dtype=np.float64)
    if np.any(v < 0):
        raise ValueError("mean_sphere_grad_sq must be >= 0")
    denom = 1.0 - (1.0 - eta * lam) ** 2 if exact else 2.0 * eta * lam
    if denom <= 0:
        raise ValueError(f"weight_decay must satisfy 0 < lr*weight_decay < 2, got lr*weight_decay = {eta * lam}")
    return np.sqrt(eta**2 * v / denom)


def _as_1d(name: str, x: object) -> np.ndarray:
    a = np.asarray(x.detach().cpu() if isinstance(x, Tensor) else x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or Inf entries")
    return a


def spearman(x: np.ndarray | Tensor, y: np.ndarray | Tensor) -> float:
    """Spearman's rank correlation: Pearson correlation of average ranks (ties get mid-ranks).

    Args:
        x: ``(n,)`` values.
        y: ``(n,)`` values.

    Returns:
        ρ in ``[-1, 1]``; NaN if either input is constant.
    """
    a, b = _as_1d("x", x), _as_1d("y", y)
    if a.shape != b.shape or a.shape[0] < 2:
        raise ValueError(f"y must have the same length (>= 2) as x, got {b.shape[0]} and {a.shape[0]}")
    return float(_rank_corr(stats.rankdata(a)[None], stats.rankdata(b)[None])[0])


def _rank_corr(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    ra = ra - ra.mean(axis=1, keepdims=True)
    rb = rb - rb.mean(axis=1, keepdims=True)
    den = np.sqrt((ra**2).sum(1) * (rb**2).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(1) / den, np.nan)


def spearman_bootstrap(
    x: np.ndarray | Tensor,
    y: np.ndarray | Tensor,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """Spearman's ρ with a percentile bootstrap interval (pairs resampled with replacement).

    Args:
        x: ``(n,)`` values.
        y: ``(n,)`` values.
        n_boot: number of bootstrap resamples.
        confidence: coverage of the interval.
        rng: numpy generator for the resampling.

    Returns:
        ``(rho, low, high)``; resamples with a constant side (undefined ρ) are dropped.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    a, b = _as_1d("x", x), _as_1d("y", y)
    rho = spearman(a, b)
    idx = rng.integers(0, a.shape[0], size=(n_boot, a.shape[0]))
    boots = _rank_corr(stats.rankdata(a[idx], axis=1), stats.rankdata(b[idx], axis=1))
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        return rho, float("nan"), float("nan")
    q = (1 - confidence) / 2
    return rho, float(np.quantile(boots, q)), float(np.quantile(boots, 1 - q))


def norm_correlations(
    norms: np.ndarray | Tensor,
    covariates: dict[str, np.ndarray],
    *,
    n_boot: int = 1000,
    rng: np.random.Generator,
) -> dict[str, tuple[float, float, float]]:
    """Spearman ρ (with 95% bootstrap interval) of the norm against each named covariate.

    Typical covariates: ``log_frequency``, ``depth`` (specificity), ``ambiguity``, ``heat``. A covariate
    that is constant gives NaN.

    Returns:
        ``{name: (rho, low, high)}``.
    """
    r = _as_1d("norms", norms)
    out: dict[str, tuple[float, float, float]] = {}
    for name, c in covariates.items():
        cv = _as_1d(name, c)
        if cv.shape != r.shape:
            raise ValueError(f"{name} must have length {r.shape[0]}, got {cv.shape[0]}")
        out[name] = spearman_bootstrap(r, cv, n_boot=n_boot, rng=rng)
    return out
