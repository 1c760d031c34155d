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
