"""A synthetic world with a known positive generator: uniform latents, vMF positives, a mixing map.

Latents ζ ~ U(S^{d-1}) (this is π_data), positives ζ̃ ~ vMF(ζ, κ) (the Markov kernel M), observations
x = g(ζ) for an injective mixing map g. Because anchors, positives and negatives are all pushed
through the same g, the density ratio of Whiteley's Assumption (B) is known in closed form:

    dM(x, ·)/dπ_data(x') = |S^{d-1}| C_d(κ) exp(κ⟨ζ, ζ'⟩),   ζ = g⁻¹(x),  ζ' = g⁻¹(x'),

(the Jacobians of g cancel), so the idealised search M̂_m is a softmax over κ⟨ζ_q, ζ_i⟩ and the
ground-truth encoder φ* = A∘g⁻¹ is available for reference curves.

References:
    N. Whiteley, "Similarity search generalisation in contrastive learning with InfoNCE loss",
    arXiv 2607.09405 (2026): Assumptions (A), (B), eqs. (1)–(2), (9).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from contrastlab.worlds.sphere import (
    log_vmf_density_ratio,
    log_vmf_ratio_second_moment,
    sample_uniform_sphere,
    sample_vmf,
    vmf_mean_resultant_length,
)

__all__ = ["SphereWorld", "Tuples"]

Mixing = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Tuples:
    """n InfoNCE tuples (anchor, positive, k negatives) in observation space, with their latents.

    Shape:
        ``anchor``, ``positive``: (n, d_in); ``negatives``: (n, k, d_in); the ``*_latent`` fields have
        the same leading shapes with last dimension d (unit rows, float64).
    """

    anchor: Tensor
    positive: Tensor
    negatives: Tensor
    anchor_latent: Tensor
    positive_latent: Tensor
    negatives_latent: Tensor

    @property
    def n(self) -> int:
        """Number of tuples."""
        return int(self.anchor.shape[0])

    @property
    def k(self) -> int:
        """Number of negatives per tuple."""
        return int(self.negatives.shape[1])


def _identity(z: Tensor) -> Tensor:
    return z


@dataclass(frozen=True, eq=False)
class SphereWorld:
    """Latents uniform on S^{d-1}, vMF(κ) positives, observations x = g(ζ); seeded and deterministic.

    Every sampler takes an explicit ``torch.Generator``; :meth:`generator` derives one from
    ``(seed, stream)`` so that a study is a pure function of the world's seed.

    Args:
        d: latent dimension (latents live on S^{d-1} ⊂ R^d), >= 2.
        kappa: concentration κ >= 0 of the positive generator M(ζ, ·) = vMF(ζ, κ).
        mixing: the map g from latents ``(N, d)`` (float64) to observations ``(N, d_in)``; must be
            injective on the sphere for the density ratio to hold. ``None`` is the identity.
        inverse: g⁻¹ from observations back to latents, needed by :meth:`ground_truth_encoder` and
            :meth:`log_density_ratio_x`; ``None`` with ``mixing=None`` is the identity.
        seed: base seed of :meth:`generator`.
        dtype: dtype of the observations handed to encoders.

    Examples:
        >>> world = SphereWorld(d=3, kappa=2.0, seed=0)
        >>> t = world.sample_tuples(8, 4, generator=world.generator(0))
        >>> t.negatives.shape
        torch.Size([8, 4, 3])
    """

    d: int = 3
    kappa: float = 10.0 / 3.0
    mixing: Mixing | None = None
    inverse: Mixing | None = None
    seed: int = 0
    dtype: torch.dtype = torch.float32
    _input_dim: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.d, bool) or not isinstance(self.d, int) or self.d < 2:
            raise ValueError(f"d must be an int >= 2, got {self.d!r}")
        k = self.kappa
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
            raise ValueError(f"kappa must be a finite real number >= 0, got {k!r}")
        if self.mixing is not None and not callable(self.mixing):
            raise TypeError(f"mixing must be callable (N, d) -> (N, d_in), got {type(self.mixing).__name__}")
        if self.inverse is not None and not callable(self.inverse):
            raise TypeError(f"inverse must be callable (N, d_in) -> (N, d), got {type(self.inverse).__name__}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {type(self.seed).__name__}")

    @classmethod
    def from_mixing(
        cls, name: str, *, d: int = 3, kappa: float = 10.0 / 3.0, seed: int = 0, dtype: torch.dtype = torch.float32
    ) -> SphereWorld:
        """A world whose g is ``contrastlab.worlds.mixing.make_mixing(name, d, seed)`` (with its inverse).

        Args:
            name: "identity", "linear", "spiral", "patches" or "mlp" (cl-ica's invertible leaky-ReLU MLP).
            d: latent dimension.
            kappa: concentration of the positive generator.
            seed: seeds both the mixing's parameters and :meth:`generator`.
            dtype: dtype of the observations.
        """
        from contrastlab.worlds.mixing import make_mixing

        g = make_mixing(name, d, seed)
        return cls(d=d, kappa=kappa, mixing=g, inverse=g.inverse, seed=seed, dtype=dtype)

    # ---- randomness -------------------------------------------------------------------------------
    def generator(self, stream: int = 0) -> torch.Generator:
        """A CPU generator seeded from ``(seed, stream)``; distinct streams give independent draws."""
        return torch.Generator().manual_seed(self.seed * 1_000_003 + int(stream))

    # ---- the maps ---------------------------------------------------------------------------------
    def mix(self, zeta: Tensor) -> Tensor:
        """X = g(ζ) for latents of shape ``(..., d)``; returns ``(..., d_in)`` in ``self.dtype``."""
        lead = zeta.shape[:-1]
        flat = zeta.reshape(-1, self.d).to(torch.float64)
        g = self.mixing or _identity
        with torch.no_grad():
            x = g(flat)
        if not isinstance(x, Tensor) or x.ndim != 2 or x.shape[0] != flat.shape[0]:
            raise ValueError(f"mixing must map (N, {self.d}) to (N, d_in), got {getattr(x, 'shape', type(x))}")
        return x.to(self.dtype).reshape(*lead, x.shape[1])

    def unmix(self, x: Tensor) -> Tensor:
        """ζ = g⁻¹(x) for observations ``(N, d_in)``, renormalised onto the sphere; ``(N, d)`` float64."""
        if self.mixing is not None and self.inverse is None:
            raise ValueError("inverse must be given to the world (g⁻¹) to map observations back to latents")
        inv = self.inverse or _identity
        with torch.no_grad():
            z = inv(x.to(torch.float64)).to(torch.float64)
        if z.ndim != 2 or z.shape[1] != self.d:
            raise ValueError(f"inverse must map (N, d_in) to (N, {self.d}), got {tuple(z.shape)}")
        return z / z.norm(dim=1, keepdim=True)

    @property
    def input_dim(self) -> int:
        """d_in, the dimension of the observations x = g(ζ)."""
        if not self._input_dim:
            self._input_dim.append(int(self.mix(torch.eye(1, self.d, dtype=torch.float64)).shape[1]))
        return self._input_dim[0]

    def ground_truth_encoder(self, rotation: Tensor | None = None) -> Callable[[Tensor], Tensor]:
        """φ* = A∘g⁻¹: the encoder that recovers the latents (up to the isometry A).

        Args:
            rotation: A, shape ``(D, d)`` with orthonormal columns (D >= d); ``None`` is the identity.

        Returns:
            A callable ``(N, d_in) -> (N, D)`` with unit rows.
        """
        if rotation is not None:
            a = rotation.to(torch.float64)
            if a.ndim != 2 or a.shape[1] != self.d or a.shape[0] < self.d:
                raise ValueError(f"rotation must have shape (D, {self.d}) with D >= {self.d}")
            if not torch.allclose(a.T @ a, torch.eye(self.d, dtype=torch.float64), atol=1e-8):
                raise ValueError("rotation must have orthonormal columns (AᵀA = I)")
        else:
            a = None

        def phi_star(x: Tensor) -> Tensor:
            z = self.unmix(x)
            out = z if a is None else z @ a.T
            return out.to(x.dtype if x.is_floating_point() else torch.float64)

        return phi_star

    # ---- sampling ---------------------------------------------------------------------------------
    def sample_latents(self, n: int, *, generator: torch.Generator) -> Tensor:
        """ζ ~ π_data = U(S^{d-1}): ``(n, d)`` float64."""
        return sample_uniform_sphere(n, self.d, generator=generator, dtype=torch.float64)

    def sample_positive_latents(self, zeta: Tensor, *, generator: torch.Generator) -> Tensor:
        """ζ̃ ~ M(ζ, ·) = vMF(ζ, κ) for each row of ``zeta`` ``(..., d)``; same shape, float64."""
        flat = zeta.reshape(-1, self.d).to(torch.float64)
        return sample_vmf(flat, float(self.kappa), generator=generator).reshape(zeta.shape)

    def sample(self, n: int, *, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` draws from π_data: ``(x (n, d_in), ζ (n, d))``."""
        z = self.sample_latents(n, generator=generator)
        return self.mix(z), z

    def sample_pairs(self, n: int, *, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``n`` (anchor, positive) pairs: ``(x_a, x_p, ζ_a, ζ_p)``."""
        za = self.sample_latents(n, generator=generator)
        zp = self.sample_positive_latents(za, generator=generator)
        return self.mix(za), self.mix(zp), za, zp

    def sample_tuples(self, n: int, k: int, *, generator: torch.Generator) -> Tuples:
        """``n`` i.i.d. tuples of Whiteley's Assumption (A): Z^a ~ π, Z^+ ~ M(Z^a, ·), k negatives ~ π.

        Args:
            n: number of tuples (>= 1).
            k: negatives per tuple (>= 1).
            generator: source of randomness.
        """
        for name, v in (("n", n), ("k", k)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        za = self.sample_latents(n, generator=generator)
        zp = self.sample_positive_latents(za, generator=generator)
        zn = self.sample_latents(n * k, generator=generator).reshape(n, k, self.d)
        return Tuples(self.mix(za), self.mix(zp), self.mix(zn), za, zp, zn)

    # ---- the known density ratio --------------------------------------------------------------------
    def log_density_ratio(self, zeta: Tensor, zeta_prime: Tensor) -> Tensor:
        """Log dM(ζ, ·)/dπ_data(ζ'), all pairs: ``(Q, d), (M, d) -> (Q, M)`` float64."""
        return log_vmf_density_ratio(zeta, zeta_prime, float(self.kappa))

    def log_density_ratio_x(self, x: Tensor, x_prime: Tensor) -> Tensor:
        """The same ratio from observations (through g⁻¹): ``(Q, d_in), (M, d_in) -> (Q, M)``."""
        return self.log_density_ratio(self.unmix(x), self.unmix(x_prime))

    def ratio_second_moment(self) -> float:
        """E[(dM(Z, ·)/dπ_data(Z'))²], Z, Z' i.i.d. π (= κ coth κ for d = 3); Prop. 2's constant."""
        return math.exp(log_vmf_ratio_second_moment(self.d, float(self.kappa)))

    def mean_resultant_length(self) -> float:
        """E⟨ζ, ζ̃⟩ for ζ̃ ~ vMF(ζ, κ): A_d(κ) = I_{d/2}(κ)/I_{d/2-1}(κ)."""
        return float(vmf_mean_resultant_length(self.d, float(self.kappa)))
