"""Naive loop references written from the papers' formulas (no vectorisation), float64, for tests."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _cos(u: Tensor, v: Tensor, normalize: bool) -> float:
    dot = sum(float(u[i]) * float(v[i]) for i in range(u.shape[0]))
    if not normalize:
        return dot
    nu = math.sqrt(sum(float(x) ** 2 for x in u))
    nv = math.sqrt(sum(float(x) ** 2 for x in v))
    return dot / ((nu if nu > 0 else 1.0) * (nv if nv > 0 else 1.0))


def _lse(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def info_nce_loop(a, p, negs, tau, variant, symmetric, normalize) -> list[float]:
    """Per-anchor loss of van den Oord et al. (InfoNCE) / Yeh et al. (DCL), one anchor at a time."""
    n = a.shape[0]
    losses = []
    for i in range(n):
        pos = _cos(a[i], p[i], normalize) / tau
        if negs is None:
            cands = [_cos(a[i], p[j], normalize) / tau for j in range(n) if j != i]
        elif negs.ndim == 2:
            cands = [_cos(a[i], negs[m], normalize) / tau for m in range(negs.shape[0])]
        else:
            cands = [_cos(a[i], negs[i, k], normalize) / tau for k in range(negs.shape[1])]
        denom = ([pos] if variant == "infonce" else []) + cands
        li = -pos + _lse(denom)
        if symmetric:
            # positive p_i as the anchor against all a_j
            cands_t = [_cos(p[i], a[j], normalize) / tau for j in range(n) if j != i]
            denom_t = ([pos] if variant == "infonce" else []) + cands_t
            li = 0.5 * (li + (-pos + _lse(denom_t)))
        losses.append(li)
    return losses


def nt_xent_loop(za, zb, tau) -> list[float]:
    """SimCLR Algorithm 1: ℓ(i, j) = −log exp(s_ij/τ) / Σ_{k≠i} exp(s_ik/τ) over the 2N views."""
    z = [za[i] for i in range(za.shape[0])] + [zb[i] for i in range(zb.shape[0])]
    n = za.shape[0]
    out = []
    for i in range(2 * n):
        j = i + n if i < n else i - n
        s = [_cos(z[i], z[k], True) / tau for k in range(2 * n) if k != i]
        out.append(-_cos(z[i], z[j], True) / tau + _lse(s))
    return out


def supcon_loop(z, labels, tau) -> list[float | None]:
    """Khosla et al. L_out per anchor (None for anchors without a positive)."""
    n = z.shape[0]
    out: list[float | None] = []
    for i in range(n):
        others = [k for k in range(n) if k != i]
        denom = _lse([_cos(z[i], z[k], True) / tau for k in others])
        pos = [k for k in others if int(labels[k]) == int(labels[i])]
        if not pos:
            out.append(None)
            continue
        out.append(-sum(_cos(z[i], z[k], True) / tau - denom for k in pos) / len(pos))
    return out


def to64(*xs: Tensor) -> list[Tensor]:
    return [x.detach().to(torch.float64) for x in xs]


def debiased_loop(a, p, negs, tau, tau_plus, beta, simclr, normalize) -> tuple[list[float], list[bool]]:
    """Debiased (Chuang et al. 2020, eq. 6) and hard-negative (Robinson et al. 2021) InfoNCE, one row at a time.

    Per anchor x with positive x⁺ and negatives u_1..u_N (scaled similarities S_j, weights w_j = e^{βS_j}):
    g = max((N·Σ_j w_j e^{S_j}/Σ_j w_j − τ⁺N e^{S⁺}) / (1 − τ⁺), N e^{−1/τ}) and
    ℓ = −log(e^{S⁺} / (e^{S⁺} + g)) = log(1 + g e^{−S⁺}). Returns the losses and whether the clamp bound.
    """
    rows = []  # (anchor, positive, negatives) per row
    n = a.shape[0]
    if simclr:
        z = [a[i] for i in range(n)] + [p[i] for i in range(n)]
        for i in range(2 * n):
            j = i + n if i < n else i - n
            rows.append((z[i], z[j], [z[k] for k in range(2 * n) if k not in (i, j)]))
    else:
        for i in range(n):
            if negs is None:
                cands = [p[j] for j in range(n) if j != i]
            elif negs.ndim == 2:
                cands = [negs[m] for m in range(negs.shape[0])]
            else:
                cands = [negs[i, k] for k in range(negs.shape[1])]
            rows.append((a[i], p[i], cands))
    losses, clamped = [], []
    for x, xp, us in rows:
        s_pos = _cos(x, xp, normalize) / tau
        s = [_cos(x, u, normalize) / tau for u in us]
        big_n = len(s)
        w = [math.exp(beta * sj) for sj in s]
        mean = sum(wj * math.exp(sj) for wj, sj in zip(w, s, strict=True)) / sum(w)
        estimate = (big_n * mean - tau_plus * big_n * math.exp(s_pos)) / (1.0 - tau_plus)
        floor = big_n * math.exp(-1.0 / tau)
        g = max(estimate, floor)
        losses.append(math.log1p(g * math.exp(-s_pos)))
        clamped.append(estimate < floor)
    return losses, clamped


def margin_mse_loop(a, p, negs, teacher, tau, normalize) -> list[float]:
    """Per-anchor MarginMSE (Hofstätter et al. 2020, eq. 1), averaged over the anchor's negatives."""
    losses = []
    for i in range(a.shape[0]):
        s_pos = _cos(a[i], p[i], normalize) / tau
        terms = []
        for k in range(negs.shape[1]):
            s_neg = _cos(a[i], negs[i, k], normalize) / tau
            t_margin = float(teacher[i, 0]) - float(teacher[i, 1 + k])
            terms.append(((s_pos - s_neg) - t_margin) ** 2)
        losses.append(sum(terms) / len(terms))
    return losses


def distill_kl_loop(a, p, negs, teacher, tau, tau_teacher, normalize) -> list[float]:
    """Per-anchor τ² · KL(softmax(T/τ_T) ‖ softmax(S/τ)) over the positive and the negatives (Lin et al. 2020)."""
    losses = []
    for i in range(a.shape[0]):
        cands = [p[i]] + [negs[i, k] for k in range(negs.shape[1])]
        s = [_cos(a[i], c, normalize) / tau for c in cands]
        t = [float(x) / tau_teacher for x in teacher[i]]
        ls, lt = _lse(s), _lse(t)
        kl = 0.0
        for sj, tj in zip(s, t, strict=True):
            pj = math.exp(tj - lt)
            if pj > 0:
                kl += pj * ((tj - lt) - (sj - ls))
        losses.append(tau * tau * kl)
    return losses
