"""Learned versus idealised softmax similarity search: the cross-entropies of Whiteley (2026).

The learned search is the model kernel (eq. 5)

    Q_τ^φ(z, dz') ∝ exp(⟨φ(z), φ(z')⟩/τ) π_data(dz'),

and its empirical version Q̂_{τ,m}^φ(z, ·) = Σ_i softmax_i(⟨φ(z), φ(ξ_i)⟩/τ) δ_{ξ_i} (eq. 6) over a corpus
ξ_1..ξ_m ~ π_data. The target is the positive generator M (population) or the idealised empirical
search M̂_m(z, ·) = Σ_i w_i δ_{ξ_i} / Σ_i w_i, w_i = dM(z, ·)/dπ_data(ξ_i) (Assumption (B)). In a
:class:`~contrastlab.worlds.vmf_world.SphereWorld` the weights are known, and M̂_m is a softmax over
κ⟨ζ_q, ζ_i⟩. The two cross-entropies are

    CrossEnt[M(z,·)‖Q_τ^φ(z,·)] = −(1/τ) ∫⟨φ(z), φ(z')⟩ M(z, dz') + log ∫ e^{⟨φ(z),φ(z')⟩/τ} π(dz')  (eq. 7)
    CrossEnt[M̂_m‖Q̂_{τ,m}^φ]   = −(1/τ) Σ_i w̄_i ⟨φ(z), φ(ξ_i)⟩ + log (1/m) Σ_i e^{⟨φ(z),φ(ξ_i)⟩/τ}    (eq. 9)

Population integrals over π_data are estimated with a large reference sample and a streamed
log-sum-exp (memory independent of its size).

References:
    N. Whiteley, "Similarity search generalisation in contrastive learning with InfoNCE loss",
    arXiv 2607.09405 (2026), eqs. (5)–(9), Propositions 1–2, eqs. (11)–(12).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from contrastlab._checks import check_embeddings, check_positive_float
from contrastlab.search.softmax import log_partition
from contrastlab.theory.risk import Encoder, MCEstimate, embed, mc_estimate
from contrastlab.worlds.sphere import log_sphere_area, log_vmf_normalizer, vmf_mean_resultant_length
from contrastlab.worlds.vmf_world import SphereWorld

__all__ = [
    "empirical_model_kernel",
    "empirical_search_ce",
    "ground_truth_population_ce",
    "idealised_search",
    "k_gap_estimates",
    "model_kernel_log_density",
    "population_ce",
    "search_cross_entropy",
]


def _pos_int(name: str, v: object, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {v!r}")
    return v


def model_kernel_log_density(query: Tensor, points: Tensor, log_z: Tensor, *, temperature: float) -> Tensor:
    """Log dQ_τ^φ(z, ·)/dπ_data(z') = ⟨φ(z), φ(z')⟩/τ − log Z_τ^φ(z) (eq. 5).

    Shape:
        ``query`` (Q, D), ``points`` (M, D), ``log_z`` (Q,) from :func:`contrastlab.search.log_partition` with
        ``average=True`` → (Q, M).
    """
    tau = check_positive_float("temperature", temperature)
    return query.to(torch.float64) @ points.to(torch.float64).T / tau - log_z.to(torch.float64)[:, None]


def empirical_model_kernel(query: Tensor, corpus: Tensor, *, temperature: float) -> Tensor:
    """Q̂_{τ,m}^φ(z, ·): softmax over ⟨φ(z), φ(ξ_i)⟩/τ across the corpus (eq. 6).

    Shape:
        ``query`` (Q, D), ``corpus`` (m, D) → weights (Q, m), rows summing to 1.
    """
    tau = check_positive_float("temperature", temperature)
    return torch.softmax(query.to(torch.float64) @ corpus.to(torch.float64).T / tau, dim=1)


def idealised_search(log_ratio: Tensor) -> Tensor:
    """M̂_m(z, ·): self-normalised importance weights w_i / Σ w_i from log w_i = log dM(z,·)/dπ(ξ_i).

    For a :class:`SphereWorld` pass ``world.log_density_ratio(ζ_q, ζ_ξ)``; the constant log|S|C_d(κ)
    cancels, so this is softmax over κ⟨ζ_q, ζ_i⟩.

    Shape:
        ``log_ratio`` (Q, m) → (Q, m), rows summing to 1.
    """
    if not isinstance(log_ratio, Tensor) or log_ratio.ndim != 2:
        raise ValueError(f"log_ratio must have shape (Q, m), got {getattr(log_ratio, 'shape', None)}")
    return torch.softmax(log_ratio.to(torch.float64), dim=1)


def search_cross_entropy(query: Tensor, corpus: Tensor, log_ratio: Tensor, *, temperature: float) -> Tensor:
    """CrossEnt[M̂_m(z,·) ‖ Q̂_{τ,m}^φ(z,·)] of eq. (9), per query.

    Shape:
        ``query`` (Q, D); ``corpus`` (m, D) shared or (Q, m, D) per query; ``log_ratio`` (Q, m) the log
        importance weights log dM(z,·)/dπ(ξ_i) (any additive per-query constant is irrelevant) → (Q,).

    Returns:
        −(1/τ) Σ_i w̄_i ⟨φ(z), φ(ξ_i)⟩ + log (1/m) Σ_i e^{⟨φ(z),φ(ξ_i)⟩/τ}, float64.
    """
    check_embeddings("query", query, ndim=2)
    tau = check_positive_float("temperature", temperature)
    q = query.to(torch.float64)
    c = corpus.to(torch.float64)
    if c.ndim == 2:
        s = q @ c.T / tau
    elif c.ndim == 3 and c.shape[0] == q.shape[0]:
        s = torch.einsum("qd,qmd->qm", q, c) / tau
    else:
        raise ValueError(f"corpus must have shape (m, D) or (Q, m, D), got {tuple(corpus.shape)}")
    if log_ratio.shape != s.shape:
        raise ValueError(f"log_ratio must have shape {tuple(s.shape)}, got {tuple(log_ratio.shape)}")
    return _search_ce_from_scores(s, log_ratio.to(torch.float64))


def _search_ce_from_scores(s: Tensor, log_w: Tensor) -> Tensor:
    m = s.shape[-1]
    return -(torch.softmax(log_w, dim=-1) * s).sum(-1) + torch.logsumexp(s, dim=-1) - math.log(m)


def ground_truth_population_ce(d: int, kappa: float, temperature: float) -> float:
    """∫CrossEnt[M‖Q_τ^{φ*}] dπ for φ* = A∘g⁻¹ in a SphereWorld, in closed form.

    With ⟨φ*(z), φ*(z')⟩ = ⟨ζ, ζ'⟩: −A_d(κ)/τ − log|S^{d-1}| − log C_d(1/τ). For κ = 1/τ this is the
    minimum over φ (the entropy of the vMF relative to π); for d = 3 it is
    −(coth κ − 1/κ)/τ + log(τ sinh(1/τ)) (−0.907 at τ = 0.3).
    """
    tau = check_positive_float("temperature", temperature)
    a = float(vmf_mean_resultant_length(d, kappa))
    return -a / tau - log_sphere_area(d) - float(log_vmf_normalizer(d, 1.0 / tau))


def population_ce(
    encoder: Encoder,
    world: SphereWorld,
    *,
    temperature: float,
    n_queries: int = 8192,
    n_positives: int = 8,
    m_ref: int = 65536,
    generator: torch.Generator,
) -> MCEstimate:
    """Monte Carlo estimate of the population cross-entropy ∫CrossEnt[M‖Q_τ^φ] dπ_data (eq. 7).

    Each of ``n_queries`` i.i.d. queries z gets ``n_positives`` draws from M(z, ·) for the first term,
    and a shared reference sample of size ``m_ref`` for log Z_τ^φ(z). The standard error covers the
    queries and positives; the reference adds a bias of about −Var(e^{s})/(2 m_ref Z²) (≈ 1e-5 at
    m_ref = 65536 for τ ≥ 0.3), not included.

    Returns:
        :class:`MCEstimate` over queries.
    """
    tau = check_positive_float("temperature", temperature)
    _pos_int("n_queries", n_queries, 2)
    _pos_int("n_positives", n_positives)
    _pos_int("m_ref", m_ref)
    xr, _ = world.sample(m_ref, generator=generator)
    phi_ref = embed(encoder, xr)
    zq = world.sample_latents(n_queries, generator=generator)
    zp = world.sample_positive_latents(zq[:, None, :].expand(-1, n_positives, -1).contiguous(), generator=generator)
    phi_q, phi_p = embed(encoder, world.mix(zq)), embed(encoder, world.mix(zp))
    align = (phi_q[:, None, :] * phi_p).sum(-1).mean(1) / tau  # (Q,)
    # log of the mean over the reference sample (− log m): the Monte Carlo estimate of log ∫ e^{⟨φ,φ'⟩/τ} dπ
    log_z = log_partition(phi_q.double(), phi_ref.double(), temperature=tau, average=True)
    return mc_estimate(-align + log_z)


def empirical_search_ce(
    encoder: Encoder,
    world: SphereWorld,
    m: int,
    *,
    temperature: float,
    n_groups: int = 256,
    group_size: int = 32,
    generator: torch.Generator,
) -> MCEstimate:
    """Monte Carlo estimate of ∫E CrossEnt[M̂_m‖Q̂_{τ,m}^φ] dπ_data (eq. 9), the similarity-search CE.

    ``n_groups`` i.i.d. groups, each of ``group_size`` queries sharing one fresh corpus ξ_1..ξ_m ~ π;
    every query's CE is an unbiased draw, and the group means are i.i.d., so the standard error is
    over groups.

    Returns:
        :class:`MCEstimate` over groups.
    """
    tau = check_positive_float("temperature", temperature)
    _pos_int("m", m)
    _pos_int("n_groups", n_groups, 2)
    _pos_int("group_size", group_size)
    means = []
    for _ in range(n_groups):
        zq = world.sample_latents(group_size, generator=generator)
        zx = world.sample_latents(m, generator=generator)
        phi_q, phi_x = embed(encoder, world.mix(zq)), embed(encoder, world.mix(zx))
        ce = search_cross_entropy(phi_q, phi_x, world.log_density_ratio(zq, zx), temperature=tau)
        means.append(ce.mean())
    return mc_estimate(torch.stack(means))


def _reference_terms(s_ref: Tensor, log_ratio: Tensor) -> tuple[Tensor, Tensor]:
    """Debiased log-mean-exp of ``s_ref`` and the importance-sampling mean of ``s_ref`` under the ratio.

    Shape:
        ``s_ref``, ``log_ratio``: (..., m) → two tensors of shape (...).

    Returns:
        ``(log_z, align)``: log (1/m) Σ e^{s} plus the delta-method correction Var(e^s)/(2 m Z²) (E log Ẑ =
        log Z − Var(e^s)/(2 m Z²) + O(1/m²), so the residual bias is O(1/m²)), and (1/m) Σ r s, unbiased
        for E_M s because the ratio r = dM/dπ is exact, constant included.
    """
    m = s_ref.shape[-1]
    mx = s_ref.amax(dim=-1, keepdim=True)
    e = torch.exp(s_ref - mx)
    z = e.mean(-1)
    rel_var = (e * e).mean(-1) / (z * z) - 1.0
    log_z = torch.log(z) + mx.squeeze(-1) + rel_var / (2.0 * m)
    align = (torch.exp(log_ratio) * s_ref).mean(-1)
    return log_z, align


def _importance_weight(world: SphereWorld, n_positives: int, m_ref: int) -> float:
    """Weight of the importance-sampling estimate of E_M⟨φ(z), φ(z')⟩ against the mean over vMF positives.

    Both are unbiased, so any fixed weight keeps the combination unbiased; the weight is the inverse-variance
    one for φ* (latent cosines): Var_IS ≈ E[(dM/dπ)²]/m_ref, Var_MC = Var_M⟨ζ, ζ'⟩/P with
    E_M⟨ζ, ζ'⟩² = 1 − (d−1) A_d(κ)/κ. The importance-sampling estimate wins for diffuse positives (small κ),
    the vMF positives for concentrated ones.
    """
    d, kappa = world.d, float(world.kappa)
    a = world.mean_resultant_length()
    second = 1.0 / d if kappa == 0 else 1.0 - (d - 1) * a / kappa
    v_mc = max(second - a * a, 1e-12) / n_positives
    v_is = world.ratio_second_moment() / m_ref
    return (1.0 / v_is) / (1.0 / v_is + 1.0 / v_mc)


def k_gap_estimates(
    encoder: Encoder,
    world: SphereWorld,
    ks: Sequence[int],
    *,
    temperature: float,
    n_groups: int = 256,
    group_size: int = 64,
    n_positives: int = 8,
    m_ref: int = 8192,
    generator: torch.Generator,
    block_groups: int = 8,
) -> dict[int, dict[str, MCEstimate]]:
    """Risks, cross-entropies and their gaps for every k in ``ks``, on one paired set of draws.

    Design (paired, so the gaps have far smaller standard errors than differences of separate
    estimates): ``n_groups`` i.i.d. groups. A group has ``group_size`` anchors z ~ π, ``n_positives``
    positives z^+ ~ M(z, ·) per anchor, one fresh set of max(ks) points ~ π whose first k serve as the
    k negatives of every anchor's tuple *and* as the corpus ξ_1..ξ_k of the idealised search (m = k),
    and a fresh reference sample of ``m_ref`` points ~ π. The reference gives log Z_τ^φ(z) (with a
    delta-method bias correction, residual O(1/m_ref²)) and an unbiased importance-sampling estimate
    of E_M⟨φ(z), φ(z')⟩ = E_π[dM/dπ · ⟨φ(z), φ(z')⟩] (the ratio is known exactly, constant included),
    averaged with the mean over the vMF positives with fixed inverse-variance weights (for φ*).
    Every per-anchor value is an unbiased draw of its target and the groups are i.i.d., so standard
    errors over group means are honest (the reference is inside the group).

    Per tuple the positive's score cancels exactly in CE_pop − ℓ = log Z(z) − log(e^{s_+}/k + (1/k)
    Σ_j e^{s_j}), which makes ``pop_minus_risk`` very precise; ``search_minus_risk`` is
    ``search_minus_pop`` + ``pop_minus_risk``.

    Args:
        encoder: callable ``(N, d_in) -> (N, D)``.
        world: the world (knows M and dM/dπ).
        ks: the numbers of negatives k (= corpus sizes m for the search CE).
        temperature: τ > 0.
        n_groups: number of i.i.d. groups.
        group_size: anchors per group.
        n_positives: positives per anchor.
        m_ref: reference sample size per group.
        generator: source of randomness.
        block_groups: groups processed at once (memory ∝ block_groups · group_size · (max(ks) + m_ref)).

    Returns:
        ``{k: {name: MCEstimate}}`` with names ``risk`` (R, eq. 2), ``risk_dcl`` (R̃), ``pop_ce``
        (eq. 7), ``search_ce`` (eq. 9 with m = k), ``pop_minus_risk`` (Prop. 1),
        ``pop_minus_risk_dcl`` (eq. 11), ``search_minus_risk`` (Prop. 2), ``search_minus_risk_dcl``
        (eq. 12) and ``search_minus_pop`` (the idealised search's own finite-m bias, m = k, "k = ∞").
    """
    tau = check_positive_float("temperature", temperature)
    ks = sorted({_pos_int("ks[i]", k) for k in ks})
    if not ks:
        raise ValueError("ks must contain at least one k")
    _pos_int("n_groups", n_groups, 2)
    _pos_int("group_size", group_size)
    _pos_int("n_positives", n_positives)
    _pos_int("m_ref", m_ref, 2)
    k_max, d, kappa = ks[-1], world.d, float(world.kappa)
    names = (
        "risk",
        "risk_dcl",
        "pop_ce",
        "search_ce",
        "pop_minus_risk",
        "pop_minus_risk_dcl",
        "search_minus_risk",
        "search_minus_risk_dcl",
        "search_minus_pop",
    )
    acc: dict[int, dict[str, list[Tensor]]] = {k: {nm: [] for nm in names} for k in ks}
    w_is = _importance_weight(world, n_positives, m_ref)
    for start in range(0, n_groups, block_groups):
        b, g, p = min(block_groups, n_groups - start), group_size, n_positives
        za = world.sample_latents(b * g, generator=generator)  # (b·G, d)
        zp = world.sample_positive_latents(za[:, None, :].expand(-1, p, -1).contiguous(), generator=generator)
        zn = world.sample_latents(b * k_max, generator=generator).reshape(b, k_max, d)
        zr = world.sample_latents(b * m_ref, generator=generator).reshape(b, m_ref, d)
        phi_a = embed(encoder, world.mix(za)).reshape(b, g, -1)  # (b, G, D)
        phi_p = embed(encoder, world.mix(zp)).reshape(b, g, p, -1)  # (b, G, P, D)
        phi_n = embed(encoder, world.mix(zn))  # (b, k_max, D)
        phi_r = embed(encoder, world.mix(zr))  # (b, m_ref, D)
        za = za.reshape(b, g, d)
        s_pos = (phi_a[:, :, None, :] * phi_p).sum(-1) / tau  # (b, G, P)
        s_neg = torch.einsum("bgd,bkd->bgk", phi_a, phi_n) / tau  # (b, G, k_max)
        log_w = kappa * torch.einsum("bgd,bkd->bgk", za, zn)  # (b, G, k_max): log dM/dπ up to a constant
        s_ref = torch.einsum("bgd,bmd->bgm", phi_a, phi_r) / tau  # (b, G, m_ref)
        log_ratio = torch.stack([world.log_density_ratio(za[i], zr[i]) for i in range(b)])  # (b, G, m_ref)
        log_z, align_is = _reference_terms(s_ref, log_ratio)  # (b, G) each; align_is ≈ E_M ⟨φ(z), φ(z')⟩/τ
        align = w_is * align_is + (1.0 - w_is) * s_pos.mean(-1)  # two unbiased estimates, fixed weights
        pop = -align + log_z
        for k in ks:
            sk = s_neg[..., :k]
            lme = torch.logsumexp(sk, dim=-1) - math.log(k)  # (b, G)
            log_den = torch.logaddexp(s_pos - math.log(k), lme[..., None])  # (b, G, P)
            search = -(torch.softmax(log_w[..., :k], dim=-1) * sk).sum(-1) + lme
            pop_minus_risk = log_z - log_den.mean(-1)
            per_anchor = {
                "risk": (log_den - s_pos).mean(-1),
                "risk_dcl": lme - s_pos.mean(-1),
                "pop_ce": pop,
                "search_ce": search,
                "pop_minus_risk": pop_minus_risk,
                "pop_minus_risk_dcl": log_z - lme,
                "search_minus_risk": search - pop + pop_minus_risk,
                "search_minus_risk_dcl": search - pop + log_z - lme,
                "search_minus_pop": search - pop,
            }
            for nm, v in per_anchor.items():
                acc[k][nm].append(v.mean(-1))  # group means (b,)
    return {k: {nm: mc_estimate(torch.cat(v)) for nm, v in acc[k].items()} for k in ks}
