"""The InfoNCE risk R(φ; k, τ) of Whiteley (2026), eqs. (1)–(2) and (14), and its DCL variant.

Conventions of the paper (not of most training code): embeddings are unit vectors, the loss carries
the "− log k" normalisation so that it has a finite limit as k → ∞, and the positive sits in the
denominator ("1 +") for InfoNCE but not for DCL (Yeh et al. 2022):

    ℓ(φ, z, k, τ)  = log(1/k + (1/k) Σ_j exp(⟨φ(z^a), φ(z_j^-) − φ(z^+)⟩/τ))        (eq. 14)
    ℓ̃(φ, z, k, τ) = log((1/k) Σ_j exp(⟨φ(z^a), φ(z_j^-) − φ(z^+)⟩/τ))              (DCL)
    R(φ; k, τ) = E ℓ,   R̂_n(φ; k, τ) = (1/n) Σ_i ℓ(φ, Z_i, k, τ)                         (eqs. 1–2)

Any encoder works: a callable mapping ``(N, d_in)`` observations to ``(N, D)`` embeddings; its outputs
are L2-normalised (φ ∈ B(Z, S^{D-1}) in the paper).

References:
    N. Whiteley, "Similarity search generalisation in contrastive learning with InfoNCE loss",
    arXiv 2607.09405 (2026).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from contrastlab._checks import check_choice, check_embeddings, check_positive_float

__all__ = [
    "Encoder",
    "MCEstimate",
    "embed",
    "empirical_risk",
    "infonce_risk",
    "tuple_loss",
]

Encoder = Callable[[Tensor], Tensor]
"""Any callable mapping observations ``(N, d_in)`` to embeddings ``(N, D)``."""


@dataclass(frozen=True)
class MCEstimate:
    """A Monte Carlo estimate: ``mean`` ± ``se`` (standard error) from ``n`` i.i.d. units."""

    mean: float
    se: float
    n: int

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """The normal-approximation interval ``mean ± z·se``."""
        return self.mean - z * self.se, self.mean + z * self.se

    def as_dict(self) -> dict[str, float]:
        """``{"mean", "se", "n"}`` for results.json."""
        return {"mean": self.mean, "se": self.se, "n": float(self.n)}


def mc_estimate(units: Tensor) -> MCEstimate:
    """Mean and standard error of i.i.d. unit values ``(n,)``."""
    u = units.detach().to(torch.float64).reshape(-1)
    n = int(u.numel())
    if n == 0:
        raise ValueError("units must be non-empty")
    se = float(u.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    return MCEstimate(float(u.mean()), se, n)


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return k


def embed(encoder: Encoder, x: Tensor, *, chunk: int = 65536) -> Tensor:
    """Encode ``x`` ``(..., d_in)`` without gradients, in chunks, L2-normalised, as float64.

    Args:
        encoder: callable ``(N, d_in) -> (N, D)``; ``nn.Module`` encoders are evaluated as they are
            (put them in eval mode first if they use batch norm or dropout).
        x: observations with any leading shape.
        chunk: rows per encoder call.

    Returns:
        Embeddings of shape ``(..., D)`` with unit rows, float64.

    Raises:
        TypeError: ``encoder`` is not callable.
        ValueError: the encoder returns the wrong shape, a non-finite value or a zero row.
    """
    if not callable(encoder):
        raise TypeError(f"encoder must be callable (N, d_in) -> (N, D), got {type(encoder).__name__}")
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    if isinstance(encoder, torch.nn.Module):  # feed a module its own parameter dtype and device
        param = next(iter(encoder.parameters()), None)
        if param is not None and param.is_floating_point():
            flat = flat.to(device=param.device, dtype=param.dtype)
    outs = []
    with torch.no_grad():
        for i in range(0, max(flat.shape[0], 1), chunk):
            xi = flat[i : i + chunk]
            e = encoder(xi)
            if not isinstance(e, Tensor) or e.ndim != 2 or e.shape[0] != xi.shape[0]:
                raise ValueError(f"encoder must return a tensor of shape (N, D), got {getattr(e, 'shape', type(e))}")
            outs.append(e.detach().to(torch.float64).cpu())
    out = torch.cat(outs) if outs else torch.empty(0, 1, dtype=torch.float64)
    norms = out.norm(dim=1, keepdim=True)
    if not bool(torch.isfinite(out).all()) or bool((norms == 0).any()):
        raise ValueError("encoder returned a non-finite or zero embedding; φ must map into the unit sphere")
    return (out / norms).reshape(*lead, out.shape[1])


def tuple_loss(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    *,
    temperature: float,
    variant: str = "infonce",
    normalize: bool = True,
) -> Tensor:
    """Per-tuple loss ℓ(φ, z, k, τ) of eq. (14) (or its DCL variant), differentiable.

    Shape:
        ``anchor``, ``positive``: (N, D); ``negatives``: (N, k, D) per anchor or (k, D) shared.
        Returns (N,).

    Args:
        anchor: φ(z^a).
        positive: φ(z^+).
        negatives: φ(z_j^-).
        temperature: τ > 0.
        variant: "infonce" (positive in the denominator, "1 +") or "dcl" (without it).
        normalize: L2-normalise the embeddings first (the paper's φ maps into the unit sphere).

    Returns:
        ℓ per tuple, including the "− log k" normalisation.
    """
    check_embeddings("anchor", anchor, ndim=2)
    check_embeddings("positive", positive, ndim=2)
    if not isinstance(negatives, Tensor) or negatives.ndim not in (2, 3):
        raise ValueError(f"negatives must have shape (N, k, D) or (k, D), got {getattr(negatives, 'shape', None)}")
    check_embeddings("negatives", negatives, ndim=negatives.ndim)
    tau = check_positive_float("temperature", temperature)
    check_choice("variant", variant, ("infonce", "dcl"))
    if positive.shape != anchor.shape:
        raise ValueError(f"positive must have shape {tuple(anchor.shape)}, got {tuple(positive.shape)}")
    if negatives.shape[-1] != anchor.shape[1] or (negatives.ndim == 3 and negatives.shape[0] != anchor.shape[0]):
        raise ValueError(f"negatives must be (N, k, D) or (k, D) with N={anchor.shape[0]}, D={anchor.shape[1]}")
    if normalize:
        anchor = torch.nn.functional.normalize(anchor, dim=-1)
        positive = torch.nn.functional.normalize(positive, dim=-1)
        negatives = torch.nn.functional.normalize(negatives, dim=-1)
    k = negatives.shape[-2]
    s_pos = (anchor * positive).sum(-1) / tau  # (N,)
    if negatives.ndim == 3:
        s_neg = torch.einsum("nd,nkd->nk", anchor, negatives) / tau  # (N, k)
    else:
        s_neg = anchor @ negatives.T / tau  # (N, k)
    return _loss_from_scores(s_pos, s_neg, k, variant)


def _loss_from_scores(s_pos: Tensor, s_neg: Tensor, k: int, variant: str) -> Tensor:
    """ℓ from scores: s_pos ``(...)``, s_neg ``(..., k)`` → ``(...)``."""
    lme = torch.logsumexp(s_neg, dim=-1) - math.log(k)  # log (1/k) Σ_j e^{s_j}
    if variant == "dcl":
        return lme - s_pos
    return torch.logaddexp(s_pos - math.log(k), lme) - s_pos


def empirical_risk(
    encoder: Encoder,
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    *,
    temperature: float,
    variant: str = "infonce",
) -> MCEstimate:
    """R̂_n(φ; k, τ) of eq. (1) on fixed tuples, with the standard error of the tuple mean.

    Shape:
        ``anchor``, ``positive``: (n, d_in); ``negatives``: (n, k, d_in) observations.

    Returns:
        The tuple mean of ℓ (``mean``) and its standard error.
    """
    pa, pp, pn = embed(encoder, anchor), embed(encoder, positive), embed(encoder, negatives)
    return mc_estimate(tuple_loss(pa, pp, pn, temperature=temperature, variant=variant, normalize=False))


def infonce_risk(
    encoder: Encoder,
    world: object,
    k: int,
    *,
    temperature: float,
    variant: str = "infonce",
    n: int = 100_000,
    group_size: int = 1,
    chunk: int = 4096,
    generator: torch.Generator,
) -> MCEstimate:
    """Monte Carlo estimate of the population risk R(φ; k, τ) of eq. (2) on ``n`` fresh tuples.

    With ``group_size = 1`` every tuple has its own k negatives and the tuples are i.i.d. With
    ``group_size = G > 1`` the tuples come in i.i.d. groups of G anchors (each with its own positive)
    that share one fresh set of k negatives: every tuple is still a draw of Assumption (A), so the
    estimate is unbiased, the standard error is over group means, and the encoder sees G times fewer
    negatives (what makes 10⁵ tuples at k = 512 affordable on a CPU).

    Args:
        encoder: callable ``(N, d_in) -> (N, D)``.
        world: a :class:`contrastlab.worlds.vmf_world.SphereWorld` (``sample_pairs``, ``sample``).
        k: negatives per tuple.
        temperature: τ > 0.
        variant: "infonce" or "dcl".
        n: number of fresh tuples (rounded up to whole groups).
        group_size: anchors sharing one negative set.
        chunk: tuples drawn and encoded at a time (rounded to whole groups).
        generator: source of randomness.

    Returns:
        :class:`MCEstimate` of R (or R̃ for DCL); ``n`` counts the i.i.d. units (tuples or groups).
    """
    _check_k(k)
    check_choice("variant", variant, ("infonce", "dcl"))
    tau = check_positive_float("temperature", temperature)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    g = group_size
    n_groups = max(-(-n // g), 2)
    per_chunk = max(chunk // g, 1)
    units = []
    for start in range(0, n_groups, per_chunk):
        b = min(per_chunk, n_groups - start)
        xa, xp, _, _ = world.sample_pairs(b * g, generator=generator)  # type: ignore[attr-defined]
        xn, _ = world.sample(b * k, generator=generator)  # type: ignore[attr-defined]
        pa = embed(encoder, xa).reshape(b, g, -1)
        pp = embed(encoder, xp).reshape(b, g, -1)
        pn = embed(encoder, xn).reshape(b, k, -1)
        s_pos = (pa * pp).sum(-1) / tau  # (b, G)
        s_neg = torch.einsum("bgd,bkd->bgk", pa, pn) / tau  # (b, G, k)
        units.append(_loss_from_scores(s_pos, s_neg, k, variant).mean(-1))  # group means (b,)
    return mc_estimate(torch.cat(units))
