"""Identifiability metrics: how well embeddings ẑ recover the true latents z.

* :func:`linear_r2` — R² of the linear regression z ← ẑ (with intercept), fitted on one part of the
  data and scored on the held-out rest (cl-ica's "linear disentanglement"; Zaliaduonis et al. 2026,
  Table 1).
* :func:`mcc` — mean absolute Pearson correlation after matching latent and embedding coordinates by
  the assignment that maximises it (``scipy.optimize.linear_sum_assignment``); 1 iff ẑ is a
  permutation-and-scaling of z (up to affine offsets).
* :func:`ape` — angle-preservation error mean_{i≠j} |z_iᵀz_j − ẑ_iᵀẑ_j|; 0 for any orthogonal map.
* :func:`orthogonality_error` — ‖σ(A) − 1‖₂, the Frobenius distance of the least-squares linear map A
  (ẑ ≈ A z) to the orthogonal group (to the Stiefel manifold when dims differ): the nearest orthogonal
  matrix to A = U S Vᵀ is U Vᵀ and ‖A − U Vᵀ‖_F = ‖S − I‖_F.

All metrics compute in float64 on CPU and return Python floats.

References:
    J. Zaliaduonis et al., "The Loss Is Not Enough", ICML 2026, arXiv 2606.04280, §5 (R², MCC, APE).
    R. S. Zimmermann et al., "Contrastive Learning Inverts the Data Generating Process", ICML 2021.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from contrastlab._checks import check_embeddings

__all__ = ["ape", "identifiability_metrics", "linear_r2", "mcc", "orthogonality_error"]

ArrayLike = Tensor | NDArray[np.floating]


def _as_f64(name: str, x: object) -> NDArray[np.float64]:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    t = check_embeddings(name, x, ndim=2)
    return t.detach().to(device="cpu", dtype=torch.float64).numpy()


def _pair(z: object, z_hat: object, min_rows: int = 2) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    a, b = _as_f64("z", z), _as_f64("z_hat", z_hat)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"z_hat must have the same number of rows as z ({a.shape[0]}), got {b.shape[0]}")
    if a.shape[0] < min_rows:
        raise ValueError(f"z must have at least {min_rows} rows, got {a.shape[0]}")
    return a, b


def linear_r2(z: ArrayLike, z_hat: ArrayLike, *, test_fraction: float = 0.5, seed: int = 0) -> float:
    """Held-out R² of the affine regression of each latent coordinate on the embedding.

    The rows are split at random (``seed``) into a fitting part and a test part of ``test_fraction``;
    R²_k = 1 − SS_res/SS_tot on the test part for each coordinate k, averaged over k (scikit-learn's
    ``r2_score`` with ``multioutput="uniform_average"``). It can be negative on held-out data.

    Args:
        z: true latents. Shape ``(N, d)``.
        z_hat: embeddings. Shape ``(N, D)``.
        test_fraction: share of rows held out, in (0, 1); both parts need at least ``D + 2`` rows.
        seed: seed of the split.

    Returns:
        The mean R² over the d coordinates.
    """
    a, b = _pair(z, z_hat)
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    n = a.shape[0]
    n_test = int(round(test_fraction * n))
    if min(n_test, n - n_test) < b.shape[1] + 2:
        raise ValueError(f"z has too few rows ({n}) for a split with D = {b.shape[1]} regressors")
    perm = np.random.default_rng(seed).permutation(n)
    test, fit = perm[:n_test], perm[n_test:]
    x_fit = np.hstack([b[fit], np.ones((fit.size, 1))])
    coef, *_ = np.linalg.lstsq(x_fit, a[fit], rcond=None)
    pred = np.hstack([b[test], np.ones((test.size, 1))]) @ coef
    ss_res = ((a[test] - pred) ** 2).sum(0)
    ss_tot = ((a[test] - a[test].mean(0)) ** 2).sum(0)
    ss_tot = np.where(ss_tot > 0, ss_tot, np.nan)
    return float(np.nanmean(1.0 - ss_res / ss_tot))


def mcc(z: ArrayLike, z_hat: ArrayLike) -> float:
    """Mean correlation coefficient: mean |Pearson(z_k, ẑ_π(k))| under the best matching π.

    With D ≠ d the matching pairs min(d, D) coordinates. Constant coordinates correlate 0.

    Args:
        z: true latents. Shape ``(N, d)``.
        z_hat: embeddings. Shape ``(N, D)``.

    Returns:
        The mean absolute correlation of the matched pairs, in [0, 1].
    """
    a, b = _pair(z, z_hat)
    a = a - a.mean(0)
    b = b - b.mean(0)
    na, nb = np.linalg.norm(a, axis=0), np.linalg.norm(b, axis=0)
    corr = np.abs((a.T @ b) / np.outer(np.where(na > 0, na, 1.0), np.where(nb > 0, nb, 1.0)))
    corr = np.minimum(corr, 1.0)
    rows, cols = linear_sum_assignment(corr, maximize=True)
    return float(corr[rows, cols].mean())


def ape(z: ArrayLike, z_hat: ArrayLike, *, normalize: bool = True, max_rows: int | None = 4096) -> float:
    """Angle-preservation error mean_{i≠j} |z_iᵀz_j − ẑ_iᵀẑ_j| (Zaliaduonis et al. 2026, §5).

    Args:
        z: true latents. Shape ``(N, d)``.
        z_hat: embeddings. Shape ``(N, D)``.
        normalize: L2-normalise the rows of both first (the paper's maps live on the sphere).
        max_rows: use only the first ``max_rows`` rows (the pairwise cost is O(N²)); ``None`` = all.

    Returns:
        The mean over the N (N − 1) ordered pairs i ≠ j.
    """
    a, b = _pair(z, z_hat)
    if max_rows is not None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 2:
            raise ValueError(f"max_rows must be None or an int >= 2, got {max_rows!r}")
        a, b = a[:max_rows], b[:max_rows]
    if normalize:
        a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-300)
        b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-300)
    diff = np.abs(a @ a.T - b @ b.T)
    n = a.shape[0]
    return float((diff.sum() - np.trace(diff)) / (n * (n - 1)))


def orthogonality_error(z: ArrayLike, z_hat: ArrayLike) -> float:
    """Distance ‖σ(A) − 1‖₂ of the least-squares linear map A (ẑ ≈ A z, no intercept) to O(d).

    0 iff ẑ = Q z exactly for an orthogonal (or, with D > d, orthonormal-column) Q.

    Args:
        z: true latents. Shape ``(N, d)``.
        z_hat: embeddings. Shape ``(N, D)``.

    Returns:
        √Σ_k (σ_k − 1)² over the min(d, D) singular values of A.
    """
    a, b = _pair(z, z_hat)
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)  # (d, D): ẑ ≈ z @ coef, A = coefᵀ
    s = np.linalg.svd(coef, compute_uv=False)
    return float(np.sqrt(((s - 1.0) ** 2).sum()))


def identifiability_metrics(
    z: ArrayLike, z_hat: ArrayLike, *, test_fraction: float = 0.5, seed: int = 0
) -> dict[str, float]:
    """All four metrics at once: ``{"r2", "mcc", "ape", "orthogonality_error"}``.

    The rows of ``z_hat`` are L2-normalised first: the paper's h = f∘g maps to the sphere, and our
    encoders return raw outputs that the losses normalise.
    """
    zh = _as_f64("z_hat", z_hat)
    zh_n = zh / np.maximum(np.linalg.norm(zh, axis=1, keepdims=True), 1e-300)
    return {
        "r2": linear_r2(z, zh_n, test_fraction=test_fraction, seed=seed),
        "mcc": mcc(z, zh_n),
        "ape": ape(z, zh_n),
        "orthogonality_error": orthogonality_error(z, zh_n),
    }
