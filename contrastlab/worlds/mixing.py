"""Mixing functions (generators) x = g(z) from latents on S^{d-1} to observations, and their inverses.

Every generator is a frozen ``nn.Module`` with the same small interface:

- ``in_dim`` (the latent dimension d) and ``out_dim`` (the observation dimension),
- ``forward(z)``: ``(N, in_dim) -> (N, out_dim)``,
- ``inverse(x)``: ``(N, out_dim) -> (N, in_dim)``, exact on the image of ``forward`` (to float rounding).

All random generators are drawn from ``torch.Generator().manual_seed(seed)`` and stored as float64
buffers, so ``make_mixing(name, d, seed)`` is a pure function of its arguments. Computation happens in
float64 and the result is returned in the input's dtype.

The module also holds the *inverse-architecture* encoders of Table 1 of Zaliaduonis et al. ("The Loss
Is Not Enough", ICML 2026, §5): encoders whose functional form contains the inverse of the generator,
with learnable parameters, so that a strong inductive bias can be compared with a generic MLP.

References:
    J. Zaliaduonis, P. Putzky, T. Richter, S. Gatidis, "The Loss Is Not Enough: Sampling Conditions
    and Inductive Bias in Contrastive Representation Learning", ICML 2026, arXiv 2606.04280 (the
    Identity, Linear, Spiral, Patches and invertible-MLP generators of §5 / Table 1).
    R. S. Zimmermann et al., "Contrastive Learning Inverts the Data Generating Process", ICML 2021
    (cl-ica: the invertible leaky-ReLU MLP mixing).
    The monomial embedding is the degree-7 S⁹ → R⁷⁰ generator of the paper's progressive-violation
    experiment.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from contrastlab._checks import check_int as _check_int

__all__ = [
    "MIXINGS",
    "INVERSE_ENCODERS",
    "Mixing",
    "IdentityMixing",
    "LinearMixing",
    "SpiralMixing",
    "PatchesMixing",
    "LeakyMLPMixing",
    "MonomialMixing",
    "LinearInverseEncoder",
    "InverseSpiralEncoder",
    "SoftInversePatchesEncoder",
    "InverseLeakyMLPEncoder",
    "make_mixing",
    "make_inverse_encoder",
    "random_orthogonal",
]


def _check_range(name: str, value: tuple[float, float]) -> tuple[float, float]:
    lo, hi = (float(v) for v in value)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(f"{name} must be a pair 0 < low <= high of finite floats, got {value!r}")
    return lo, hi


def random_orthogonal(n: int, *, generator: torch.Generator) -> Tensor:
    """A Haar-random orthogonal ``(n, n)`` matrix in float64 (QR of a Gaussian with the sign fix).

    Args:
        n: size (>= 1).
        generator: source of randomness.

    Returns:
        Tensor ``(n, n)``, float64, with ``QᵀQ = I``.
    """
    _check_int("n", n, 1)
    a = torch.randn(n, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    # Multiplying column j by sign(R_jj) makes the factorisation unique and the law Haar (Mezzadri 2007).
    s = torch.sign(torch.diagonal(r))
    s[s == 0] = 1.0
    return q * s


def _check_input(name: str, x: object, dim: int) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"{name} must have shape (N, {dim}), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


class Mixing(nn.Module, abc.ABC):
    """Base class of the generators: frozen, float64 inside, ``forward`` and ``inverse`` checked.

    Subclasses implement ``_forward`` and ``_inverse`` on float64 tensors.

    Attributes:
        in_dim: latent dimension d.
        out_dim: observation dimension.
    """

    in_dim: int
    out_dim: int

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim = _check_int("in_dim", in_dim, 1)
        self.out_dim = _check_int("out_dim", out_dim, 1)

    def forward(self, z: Tensor) -> Tensor:
        """Map latents ``z`` of shape ``(N, in_dim)`` to observations ``(N, out_dim)``."""
        _check_input("z", z, self.in_dim)
        return self._forward(z.to(torch.float64)).to(z.dtype)

    def inverse(self, x: Tensor) -> Tensor:
        """Map observations ``x`` of shape ``(N, out_dim)`` back to latents ``(N, in_dim)``.

        Exact (to rounding) for ``x`` in the image of :meth:`forward`.
        """
        _check_input("x", x, self.out_dim)
        return self._inverse(x.to(torch.float64)).to(x.dtype)

    @abc.abstractmethod
    def _forward(self, z: Tensor) -> Tensor:
        """G on float64 latents ``(N, in_dim)``."""

    @abc.abstractmethod
    def _inverse(self, x: Tensor) -> Tensor:
        """g⁻¹ on float64 observations ``(N, out_dim)``."""


class IdentityMixing(Mixing):
    """g(z) = z (Table 1, "Identity").

    Args:
        latent_dim: d.
        seed: unused (no randomness); accepted so that every generator has the same factory signature.
    """

    def __init__(self, latent_dim: int, *, seed: int = 0) -> None:
        super().__init__(latent_dim, latent_dim)
        self.seed = seed

    def _forward(self, z: Tensor) -> Tensor:
        return z.clone()

    def _inverse(self, x: Tensor) -> Tensor:
        return x.clone()


class LinearMixing(Mixing):
    """A random injective linear map g(z) = A z, A = U diag(s) Vᵀ (Table 1, "Linear", S² → R⁷).

    U ``(out_dim, d)`` has orthonormal columns, V ``(d, d)`` is orthogonal (both Haar-random) and the
    singular values s are uniform in ``singular_range``, so the condition number is at most
    ``high / low``. The paper's code uses an unconditioned ``diag(rand) ⊕ randn`` matrix; ours bounds the
    conditioning so that every seed gives a comparable problem.

    Args:
        latent_dim: d.
        seed: seed of the random matrix.
        out_dim: observation dimension (>= d); default ``d + 4`` (7 for d = 3, as in the paper).
        singular_range: bounds of the singular values.

    Attributes:
        matrix: A, float64 buffer of shape ``(out_dim, d)``.
        pinv: A⁺ = V diag(1/s) Uᵀ, float64 buffer of shape ``(d, out_dim)``.
    """

    matrix: Tensor
    pinv: Tensor
    singular_values: Tensor

    def __init__(
        self,
        latent_dim: int,
        *,
        seed: int = 0,
        out_dim: int | None = None,
        singular_range: tuple[float, float] = (0.5, 1.5),
    ) -> None:
        d = _check_int("latent_dim", latent_dim, 1)
        out = d + 4 if out_dim is None else _check_int("out_dim", out_dim, d)
        super().__init__(d, out)
        lo, hi = _check_range("singular_range", singular_range)
        self.seed = seed
        g = torch.Generator().manual_seed(seed)
        u = random_orthogonal(out, generator=g)[:, :d]
        v = random_orthogonal(d, generator=g)
        s = lo + (hi - lo) * torch.rand(d, generator=g, dtype=torch.float64)
        self.register_buffer("singular_values", s)
        self.register_buffer("matrix", (u * s) @ v.T)
        self.register_buffer("pinv", (v / s) @ u.T)

    def _forward(self, z: Tensor) -> Tensor:
        return z @ self.matrix.T

    def _inverse(self, x: Tensor) -> Tensor:
        return x @ self.pinv.T


def _rotate_pair(x: Tensor, y: Tensor, angle: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate the planar points (x, y) by ``angle`` (all of shape ``(N,)``)."""
    c, s = torch.cos(angle), torch.sin(angle)
    return c * x - s * y, s * x + c * y


class SpiralMixing(Mixing):
    """Spiral: rotate (z₁, z₂) by θ = n π z₃, keep the other coordinates (Table 1, "Spiral").

    z₃ is unchanged, so the inverse reads θ from x₃ and rotates back by −θ exactly.

    Args:
        latent_dim: d >= 3.
        seed: unused (deterministic map).
        n_periods: n in θ = n π z₃ (the paper's code uses 2).
    """

    def __init__(self, latent_dim: int, *, seed: int = 0, n_periods: float = 2.0) -> None:
        d = _check_int("latent_dim", latent_dim, 3)
        super().__init__(d, d)
        bad = isinstance(n_periods, bool) or not isinstance(n_periods, (int, float))
        if bad or not math.isfinite(n_periods):
            raise ValueError(f"n_periods must be a finite real number, got {n_periods!r}")
        self.seed = seed
        self.n_periods = float(n_periods)

    def _spin(self, x: Tensor, sign: float) -> Tensor:
        theta = sign * self.n_periods * math.pi * x[:, 2]
        a, b = _rotate_pair(x[:, 0], x[:, 1], theta)
        return torch.cat([a[:, None], b[:, None], x[:, 2:]], dim=1)

    def _forward(self, z: Tensor) -> Tensor:
        return self._spin(z, 1.0)

    def _inverse(self, x: Tensor) -> Tensor:
        return self._spin(x, -1.0)


class PatchesMixing(Mixing):
    """Piecewise rotations in K slices (Table 1, "Patches").

    With b(t) = min(⌊K |t|⌋, K − 1) the slice of a coordinate t ∈ [−1, 1] and the slice angle
    α_b = π / (K − b), the map is P ∘ R ∘ P where P rotates (x₁, x₂) by α_{b(x₃)} (x₃ unchanged) and R is
    the quarter turn about the second axis (x₁, x₂, x₃) ↦ (x₃, x₂, −x₁), written as an exact signed
    permutation. Coordinates beyond the third are unchanged. It is discontinuous across slice borders
    but bijective, and P keeps x₃, so each P is inverted exactly by reading the slice from x₃.

    Args:
        latent_dim: d >= 3.
        seed: unused (deterministic map).
        n_slices: K (the paper's code uses 4).
    """

    def __init__(self, latent_dim: int, *, seed: int = 0, n_slices: int = 4) -> None:
        d = _check_int("latent_dim", latent_dim, 3)
        super().__init__(d, d)
        self.seed = seed
        self.n_slices = _check_int("n_slices", n_slices, 1)

    def slice_angle(self, t: Tensor) -> Tensor:
        """α_{b(t)} = π / (K − b(t)) for coordinates ``t`` of shape ``(N,)``."""
        k = self.n_slices
        b = torch.clamp(torch.floor(k * t.abs()), max=k - 1)
        return math.pi / (k - b)

    def _piecewise(self, x: Tensor, sign: float) -> Tensor:
        a, b = _rotate_pair(x[:, 0], x[:, 1], sign * self.slice_angle(x[:, 2]))
        return torch.cat([a[:, None], b[:, None], x[:, 2:]], dim=1)

    @staticmethod
    def _quarter(x: Tensor, sign: float) -> Tensor:
        # R(x1, x2, x3) = (x3, x2, -x1); R⁻¹(y1, y2, y3) = (-y3, y2, y1).
        if sign > 0:
            head = torch.stack([x[:, 2], x[:, 1], -x[:, 0]], dim=1)
        else:
            head = torch.stack([-x[:, 2], x[:, 1], x[:, 0]], dim=1)
        return torch.cat([head, x[:, 3:]], dim=1)

    def _forward(self, z: Tensor) -> Tensor:
        return self._piecewise(self._quarter(self._piecewise(z, 1.0), 1.0), 1.0)

    def _inverse(self, x: Tensor) -> Tensor:
        return self._piecewise(self._quarter(self._piecewise(x, -1.0), -1.0), -1.0)


class LeakyMLPMixing(Mixing):
    """An invertible leaky-ReLU MLP (cl-ica style; Table 1, "InvMLP").

    g = W_L ∘ σ ∘ W_{L−1} ∘ … ∘ σ ∘ W_1 with square W_i = Q_i diag(s_i) P_iᵀ (Q_i, P_i Haar-orthogonal,
    s_i uniform in ``singular_range``) and σ the leaky ReLU of slope ``slope`` (no bias, no activation
    after the last layer). Each layer's condition number is at most high/low, and the Jacobian's singular
    values lie in [low^L · slope^(L−1), high^L]. The inverse is W_1⁻¹ ∘ σ⁻¹ ∘ … ∘ W_L⁻¹ with σ⁻¹ the leaky
    ReLU of slope 1/slope and W_i⁻¹ = P_i diag(1/s_i) Q_iᵀ.

    cl-ica draws its weights at random and rejects ill-conditioned ones; we build them well conditioned.

    Args:
        latent_dim: d.
        seed: seed of the weights.
        n_layers: L (>= 1; default 3).
        slope: negative slope of the leaky ReLU, in (0, 1].
        singular_range: bounds of each layer's singular values.

    Attributes:
        weights: float64 buffers ``weight_0 … weight_{L−1}`` of shape ``(d, d)`` and inverses
            ``weight_inv_i``.
    """

    def __init__(
        self,
        latent_dim: int,
        *,
        seed: int = 0,
        n_layers: int = 3,
        slope: float = 0.2,
        singular_range: tuple[float, float] = (0.5, 1.5),
    ) -> None:
        d = _check_int("latent_dim", latent_dim, 1)
        super().__init__(d, d)
        self.n_layers = _check_int("n_layers", n_layers, 1)
        if isinstance(slope, bool) or not isinstance(slope, (int, float)) or not 0 < slope <= 1:
            raise ValueError(f"slope must be a real number in (0, 1], got {slope!r}")
        self.slope = float(slope)
        lo, hi = _check_range("singular_range", singular_range)
        self.singular_range = (lo, hi)
        self.seed = seed
        g = torch.Generator().manual_seed(seed)
        for i in range(self.n_layers):
            q = random_orthogonal(d, generator=g)
            p = random_orthogonal(d, generator=g)
            s = lo + (hi - lo) * torch.rand(d, generator=g, dtype=torch.float64)
            self.register_buffer(f"weight_{i}", (q * s) @ p.T)
            self.register_buffer(f"weight_inv_{i}", (p / s) @ q.T)

    def layer_weights(self) -> list[Tensor]:
        """The weight matrices W_1 … W_L, each ``(d, d)`` float64."""
        return [getattr(self, f"weight_{i}") for i in range(self.n_layers)]

    def _forward(self, z: Tensor) -> Tensor:
        h = z
        for i, w in enumerate(self.layer_weights()):
            if i > 0:
                h = torch.where(h >= 0, h, self.slope * h)
            h = h @ w.T
        return h

    def _inverse(self, x: Tensor) -> Tensor:
        h = x
        for i in reversed(range(self.n_layers)):
            h = h @ getattr(self, f"weight_inv_{i}").T
            if i > 0:
                h = torch.where(h >= 0, h, h / self.slope)
        return h


class MonomialMixing(Mixing):
    """Monomial embedding g(z) = (z₁, z₁², …, z₁^D, z₂, …, z₂^D, …, z_d^D).

    The progressive-violation generator of Zaliaduonis et al. (2026), §5: S⁹ → R⁷⁰ with degree D = 7. Each latent coordinate is replaced by its first D powers, coordinate by coordinate, so the output
    has ``d · D`` entries and the entry ``i · D + (p − 1)`` is z_i^p. It is deterministic (no
    parameters) and injective on all of R^d because the degree-1 block is z itself; the inverse reads
    those entries, which is exact on the image. Entries lie in [−1, 1] on the sphere, and the high
    powers are small except near the poles |z_i| ≈ 1, so the map is strongly non-linear but smooth.

    Args:
        latent_dim: d.
        seed: unused (deterministic map); accepted for the common factory signature.
        degree: D >= 1, the highest power (the paper: 7).
    """

    exponents: Tensor

    def __init__(self, latent_dim: int, *, seed: int = 0, degree: int = 7) -> None:
        d = _check_int("latent_dim", latent_dim, 1)
        self.degree = _check_int("degree", degree, 1)
        super().__init__(d, d * self.degree)
        self.seed = seed
        self.register_buffer("exponents", torch.arange(1, self.degree + 1, dtype=torch.float64))

    def _forward(self, z: Tensor) -> Tensor:
        # (N, d, 1) ** (D,) -> (N, d, D): row-major flattening keeps each coordinate's powers together.
        return z.unsqueeze(-1).pow(self.exponents).reshape(z.shape[0], -1)

    def _inverse(self, x: Tensor) -> Tensor:
        return x[:, :: self.degree].clone()


MIXINGS: dict[str, type[Mixing]] = {
    "identity": IdentityMixing,
    "linear": LinearMixing,
    "spiral": SpiralMixing,
    "patches": PatchesMixing,
    "mlp": LeakyMLPMixing,
    "monomial": MonomialMixing,
}
"""Generator name → class; every class is constructed as ``cls(latent_dim, seed=seed, ...)``."""


def make_mixing(
    name: str,
    latent_dim: int,
    seed: int = 0,
    *,
    out_dim: int | None = None,
    n_periods: float = 2.0,
    n_slices: int = 4,
    n_layers: int = 3,
    slope: float = 0.2,
    singular_range: tuple[float, float] = (0.5, 1.5),
    degree: int = 7,
) -> Mixing:
    """Build the generator ``name`` for latents on S^{latent_dim − 1}, deterministically from ``seed``.

    Options that do not apply to ``name`` are ignored (e.g. ``n_slices`` for "spiral").

    Args:
        name: one of ``MIXINGS``: "identity", "linear", "spiral", "patches", "mlp", "monomial".
        latent_dim: d.
        seed: seed of the random parameters (Linear, MLP).
        out_dim: observation dimension of "linear" (default d + 4).
        n_periods: n of "spiral" (θ = n π z₃).
        n_slices: K of "patches".
        n_layers: depth of "mlp".
        slope: leaky-ReLU slope of "mlp".
        singular_range: singular-value bounds of "linear" and of each "mlp" layer.
        degree: highest power of "monomial".

    Returns:
        A frozen :class:`Mixing`.

    Raises:
        ValueError: unknown ``name`` or an invalid option.

    Examples:
        >>> g = make_mixing("spiral", 3, seed=0)
        >>> z = torch.nn.functional.normalize(torch.randn(4, 3), dim=1)
        >>> torch.allclose(g.inverse(g(z)), z, atol=1e-6)
        True
    """
    if name not in MIXINGS:
        raise ValueError(f"name must be one of {tuple(MIXINGS)}, got {name!r}")
    if name == "identity":
        m: Mixing = IdentityMixing(latent_dim, seed=seed)
    elif name == "linear":
        m = LinearMixing(latent_dim, seed=seed, out_dim=out_dim, singular_range=singular_range)
    elif name == "spiral":
        m = SpiralMixing(latent_dim, seed=seed, n_periods=n_periods)
    elif name == "patches":
        m = PatchesMixing(latent_dim, seed=seed, n_slices=n_slices)
    elif name == "monomial":
        m = MonomialMixing(latent_dim, seed=seed, degree=degree)
    else:
        m = LeakyMLPMixing(latent_dim, seed=seed, n_layers=n_layers, slope=slope, singular_range=singular_range)
    return m.requires_grad_(False).eval()


# --------------------------------------------------------------------------------------------------
# Inverse-architecture encoders (Table 1, "violated + inductive bias"). Outputs are raw; the losses
# and metrics L2-normalise them.


class LinearInverseEncoder(nn.Module):
    """f(x) = W x + b: the inverse architecture of the Identity and Linear generators.

    Args:
        in_dim: observation dimension.
        out_dim: latent dimension d.

    Shape:
        ``(N, in_dim) -> (N, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = _check_int("in_dim", in_dim, 1), _check_int("out_dim", out_dim, 1)
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` of shape ``(N, in_dim)``."""
        return self.linear(_check_input("x", x, self.in_dim))


class InverseSpiralEncoder(nn.Module):
    """Learnable inverse of :class:`SpiralMixing`.

    A learnable affine read-out c(x) = aᵀx + b of the control coordinate gives the angle θ = n π c(x);
    (x₁, x₂) is rotated back by −θ and a learnable linear map W acts on (x₁', x₂', c, x₄, …): the
    read-out takes z₃'s place in the output, so the loss trains it directly as well as through the
    angle. The exact inverse is one point of the family (a = e₃, b = 0, W = I); W starts at random
    and a at e₃ plus small noise (the architecture knows which coordinate drives the spiral, as the
    paper's inverse encoders do).

    Args:
        dim: d (= observation dimension) >= 3.
        n_periods: n of the generator.

    Shape:
        ``(N, dim) -> (N, dim)``.
    """

    def __init__(self, dim: int, *, n_periods: float = 2.0) -> None:
        super().__init__()
        self.in_dim = self.out_dim = _check_int("dim", dim, 3)
        self.n_periods = float(n_periods)
        self.control = nn.Linear(dim, 1)
        self.out = nn.Linear(dim, dim)
        with torch.no_grad():
            # Start the read-out near the generator's control coordinate (e₃ plus noise of scale 0.1/√d).
            # From a random start 3 of 4 seeds stalled at R² ≈ 0.32; our reading is that the read-out,
            # whose sign is free in the output, settles at c ≈ −z₃ and so doubles the twist.
            self.control.weight.mul_(0.1 / self.control.weight.std().clamp_min(1e-12) / math.sqrt(dim))
            self.control.weight[0, 2] += 1.0
            self.control.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` of shape ``(N, dim)``."""
        _check_input("x", x, self.in_dim)
        c = self.control(x)  # (N, 1): the read-out of the control coordinate z₃
        a, b = _rotate_pair(x[:, 0], x[:, 1], -self.n_periods * math.pi * c[:, 0])
        return self.out(torch.cat([a[:, None], b[:, None], c, x[:, 3:]], dim=1))


class SoftInversePatchesEncoder(nn.Module):
    """Soft, learnable inverse of :class:`PatchesMixing`.

    The hard slice index b(x₃) is replaced by soft weights w_k(t) = softmax_k(−β (|t| − c_k)²) with
    learnable centres c_k (initialised at the slice centres (k + ½)/K) and learnable β > 0 (initialised
    at ``beta``); each piecewise rotation is undone by the weighted angle −Σ_k w_k π/(K − k), the quarter
    turn by its exact inverse, and a learnable linear map acts last. Smooth, so it trains by gradient,
    but it cannot represent the discontinuity exactly (the paper reports R² 0.88 for its version).

    Args:
        dim: d >= 3.
        n_slices: K of the generator.
        beta: initial sharpness β.

    Shape:
        ``(N, dim) -> (N, dim)``.
    """

    angles: Tensor

    def __init__(self, dim: int, *, n_slices: int = 4, beta: float = 50.0) -> None:
        super().__init__()
        self.in_dim = self.out_dim = _check_int("dim", dim, 3)
        k = _check_int("n_slices", n_slices, 1)
        if not beta > 0:
            raise ValueError(f"beta must be > 0, got {beta!r}")
        self.n_slices = k
        self.centres = nn.Parameter((torch.arange(k, dtype=torch.float32) + 0.5) / k)
        self.log_beta = nn.Parameter(torch.tensor(math.log(beta), dtype=torch.float32))
        self.register_buffer("angles", math.pi / (k - torch.arange(k, dtype=torch.float32)))
        self.out = nn.Linear(dim, dim)

    def _unrotate(self, x: Tensor) -> Tensor:
        w = torch.softmax(-self.log_beta.exp() * (x[:, 2:3].abs() - self.centres) ** 2, dim=1)  # (N, K)
        a, b = _rotate_pair(x[:, 0], x[:, 1], -(w @ self.angles.to(x.dtype)))
        return torch.cat([a[:, None], b[:, None], x[:, 2:]], dim=1)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` of shape ``(N, dim)``."""
        _check_input("x", x, self.in_dim)
        return self.out(self._unrotate(PatchesMixing._quarter(self._unrotate(x), -1.0)))


class InverseLeakyMLPEncoder(nn.Module):
    """Learnable inverse architecture of :class:`LeakyMLPMixing`.

    L square linear layers with leaky ReLUs of slope 1/slope between them (the functional form of g⁻¹),
    weights learnt from a random orthogonal start. (The paper has no inverse encoder for its MLP
    generator: Table 1 "N/A".)

    Args:
        dim: d.
        n_layers: L of the generator.
        slope: slope of the generator's leaky ReLU (the encoder uses 1/slope).

    Shape:
        ``(N, dim) -> (N, dim)``.
    """

    def __init__(self, dim: int, *, n_layers: int = 3, slope: float = 0.2) -> None:
        super().__init__()
        self.in_dim = self.out_dim = _check_int("dim", dim, 1)
        self.n_layers = _check_int("n_layers", n_layers, 1)
        if not 0 < slope <= 1:
            raise ValueError(f"slope must be in (0, 1], got {slope!r}")
        self.inv_slope = 1.0 / float(slope)
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_layers))
        for layer in self.layers:
            assert isinstance(layer, nn.Linear)
            nn.init.orthogonal_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` of shape ``(N, dim)``."""
        h = _check_input("x", x, self.in_dim)
        for i, layer in enumerate(self.layers):
            if i > 0:
                h = torch.where(h >= 0, h, self.inv_slope * h)
            h = layer(h)
        return h


def _linear_for(m: Mixing) -> nn.Module:
    return LinearInverseEncoder(m.out_dim, m.in_dim)


def _spiral_for(m: Mixing) -> nn.Module:
    assert isinstance(m, SpiralMixing)
    return InverseSpiralEncoder(m.in_dim, n_periods=m.n_periods)


def _patches_for(m: Mixing) -> nn.Module:
    assert isinstance(m, PatchesMixing)
    return SoftInversePatchesEncoder(m.in_dim, n_slices=m.n_slices)


def _mlp_for(m: Mixing) -> nn.Module:
    assert isinstance(m, LeakyMLPMixing)
    return InverseLeakyMLPEncoder(m.in_dim, n_layers=m.n_layers, slope=m.slope)


INVERSE_ENCODERS: dict[str, Callable[[Mixing], nn.Module]] = {
    "identity": _linear_for,
    "linear": _linear_for,
    "spiral": _spiral_for,
    "patches": _patches_for,
    "mlp": _mlp_for,
}
"""Generator name → factory of its inverse-architecture encoder (linear, inverse spiral, soft inverse
patches, learnable inverse leaky-ReLU MLP)."""


def make_inverse_encoder(mixing: Mixing, *, seed: int = 0) -> nn.Module:
    """The inverse-architecture encoder matched to ``mixing``, initialised from ``seed``.

    Args:
        mixing: a generator built by :func:`make_mixing`.
        seed: seed of the encoder's initial parameters.

    Returns:
        An ``nn.Module`` mapping ``(N, mixing.out_dim) -> (N, mixing.in_dim)`` (raw, not normalised).

    Raises:
        TypeError: ``mixing`` is not one of this module's generators.
    """
    for name, cls in MIXINGS.items():
        if type(mixing) is cls:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return INVERSE_ENCODERS[name](mixing)
    names = tuple(c.__name__ for c in MIXINGS.values())
    raise TypeError(f"mixing must be one of {names}, got {type(mixing).__name__}")
