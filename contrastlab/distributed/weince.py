"""WEINCE over the global batch under torch.distributed, equal to one process.

Erol et al. 2026 (arXiv 2606.00262; :mod:`contrastlab.losses.weince`). Each rank
holds n of the N samples (2n of the 2N SimCLR views) and computes the single-process WEINCE of the
global batch restricted to its own rows:

* **logits**: local views (rows) against the 2N gathered views (candidates, :func:`gather_with_grad`,
  so every rank's loss reaches every rank's rows). Global arrangement ``[Z_a (N, rank order); Z_b (N)]``:
  local view-a row i is candidate ``offset + i``, its positive ``N + offset + i`` (and vice versa).
* **per-anchor tail fits** (k_tail, OLS slopes, ΔAIC, ρ_i): from each local anchor's 2N − 2 global
  negatives — the same numbers as the single-process rows.
* **pivot ρ_0**: the q-order statistic of the ρ of *all* 2N anchors (ρ gathered without gradient).
* **global β_t** (``beta_mode="global_ema"`` and the top-M terms): the batch-level tail fit of the
  official code over all the global batch's negative similarities. Only its k_tail largest values
  matter, so each rank sends its local k_tail largest (k_tail from the global count) and every rank
  fits the same pooled tail; the EMA state then advances identically on every rank.

No gradient flows through any statistic (stop-gradient, as in one process). Explicit negatives are
supported as in :func:`contrastlab.distributed.info_nce_gathered`: shared ``(M_r, D)`` negatives are
gathered into one set, per-anchor ``(n, K, D)`` negatives stay local; ρ_0 and β_t are again global.

The share convention of :mod:`contrastlab.distributed` holds: the mean over ranks of the returned
shares is the single-process loss, and the gradient at rank r's rows is R × the single-process one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrastlab import distributed as cd
from contrastlab._checks import compute_dtype
from contrastlab.losses._common import (
    TemperatureLike,
    check_finite_loss,
    l2_normalize,
    resolve_inverse_temperature,
)
from contrastlab.losses.weince import (
    GlobalBetaConfig,
    WEINCEStats,
    _anchor_tail_stats,
    _top_values,
    _weibit,
    global_tail_beta,
    tail_size,
    update_beta_ema,
    validate_weince_args,
    weince,
)

__all__ = ["weince_gathered", "global_tail_beta_gathered"]


@torch.no_grad()
def global_tail_beta_gathered(
    neg_values: Tensor, *, tail_frac: float = 0.05, min_tail: int = 1024, eps: float = 1e-6
) -> tuple[float, float] | None:
    """:func:`contrastlab.losses.weince.global_tail_beta` of the union of every rank's ``neg_values``.

    Each rank selects its ``k_tail`` largest finite values (k_tail computed from the global count),
    the selections are all-gathered (no gradient) and every rank fits the same pooled tail, which
    holds the global k_tail largest values. In one process it is ``global_tail_beta(neg_values)``.

    Shape:
        neg_values: any shape; non-finite entries (masked self/positive columns) are ignored.
    """
    vals = neg_values.detach().reshape(-1)
    vals = vals[torch.isfinite(vals)]
    total = cd._count(vals.numel(), vals.device) if cd.world_size() > 1 else vals.numel()
    k_tail = min(int(max(min_tail, tail_frac * total)), total)
    local_top = torch.topk(vals, k=min(k_tail, vals.numel()), sorted=False).values
    pool = cd.gather_no_grad(local_top)
    return global_tail_beta(pool, tail_frac=tail_frac, min_tail=min_tail, eps=eps, total=total)


def weince_gathered(
    z_a: Tensor,
    z_b: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: TemperatureLike = 0.5,
    beta_mode: str = "per_anchor",
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    margin: float = 2.0,
    eps: float = 1e-6,
    fixed_lambda: float | None = None,
    aux_top_m: int = 0,
    aux_weight: float = 0.5,
    global_beta: GlobalBetaConfig = GlobalBetaConfig(),  # noqa: B008 (frozen dataclass, immutable)
    beta_ema: float | Tensor | None = None,
    reduction: str = "mean",
    return_stats: bool = False,
) -> Tensor | tuple[Tensor, WEINCEStats]:
    """:func:`contrastlab.losses.weince` over the global batch, computed from this rank's rows.

    Arguments, shapes and defaults as in ``weince`` (here ``z_a``, ``z_b`` are this rank's ``(n, D)``
    rows and shared negatives this rank's ``(M_r, D)`` part). See the module docstring for what is
    gathered. In one process it is ``weince`` itself.

    Returns:
        This rank's share of the loss (``reduction="none"``: its ``(2n,)`` per-view losses, view-a rows
        first, or ``(n,)`` with explicit negatives — the single-process values of these rows), or
        ``(share, stats)``: ``stats.tail`` and ``stats.beta`` hold this rank's anchors (``rho0`` is the
        global pivot); ``stats.beta_ema`` is the new global β_t, the same on every rank.
    """
    if cd.world_size() == 1:
        return weince(
            z_a,
            z_b,
            negatives,
            temperature=temperature,
            beta_mode=beta_mode,
            q=q,
            tail_frac=tail_frac,
            min_tail=min_tail,
            kappa_rho=kappa_rho,
            kappa_aic=kappa_aic,
            margin=margin,
            eps=eps,
            fixed_lambda=fixed_lambda,
            aux_top_m=aux_top_m,
            aux_weight=aux_weight,
            global_beta=global_beta,
            beta_ema=beta_ema,
            reduction=reduction,
            return_stats=return_stats,
        )
    beta_prev = validate_weince_args(
        z_a,
        z_b,
        negatives,
        beta_mode=beta_mode,
        reduction=reduction,
        tail_options=(q, tail_frac, min_tail, kappa_rho, kappa_aic, margin, eps),
        fixed_lambda=fixed_lambda,
        aux_top_m=aux_top_m,
        aux_weight=aux_weight,
        global_beta=global_beta,
        beta_ema=beta_ema,
        return_stats=return_stats,
    )

    dtype = compute_dtype(z_a, z_b, *(() if negatives is None else (negatives,)))
    device = z_a.device
    with torch.autocast(device_type=device.type, enabled=False):
        inv_t = resolve_inverse_temperature(temperature, dtype, device)
        tau_det = 1.0 / inv_t if isinstance(inv_t, float) else float(1.0 / inv_t.detach())
        a, b = l2_normalize(z_a.to(dtype)), l2_normalize(z_b.to(dtype))
        n = a.shape[0]
        rows = torch.arange(2 * n if negatives is None else n, device=device)
        self_cols: Tensor | None = None
        if negatives is None:
            a_all, offset = cd.gather_with_grad(a)
            b_all, _ = cd.gather_with_grad(b)
            big_n = a_all.shape[0]
            local, cand = torch.cat([a, b]), torch.cat([a_all, b_all])  # (2n, D), (2N, D)
            idx = torch.arange(n, device=device)
            self_cols = torch.cat([offset + idx, big_n + offset + idx])
            pos_index = torch.cat([big_n + offset + idx, offset + idx])
            with torch.no_grad():
                cos = local.detach() @ cand.detach().T  # (2n, 2N) cosines
            logits_pl = (local * inv_t) @ cand.T  # (2n, 2N) s/τ, with gradient
            logits_pl = logits_pl.index_put((rows, self_cols), torch.tensor(float("-inf"), dtype=dtype, device=device))
            k_neg, count = 2 * big_n - 2, 2 * big_n
            top = _top_values(cos, tail_size(k_neg, tail_frac, min_tail), exclude=(self_cols, pos_index))
        else:
            nv = l2_normalize(negatives.to(dtype))
            a_s = a * inv_t
            pos_pl = (a_s * b).sum(dim=1, keepdim=True)  # (n, 1)
            if nv.ndim == 2:
                nv, _ = cd.gather_with_grad(nv)  # every rank's shared negatives: one set of Σ M_r rows
                neg_pl = a_s @ nv.T  # (n, M)
            else:
                neg_pl = torch.bmm(nv, a_s.unsqueeze(2)).squeeze(2)  # (n, K)
            logits_pl = torch.cat([pos_pl, neg_pl], dim=1)  # the positive is column 0
            pos_index = torch.zeros(n, dtype=torch.long, device=device)
            k_neg, count = neg_pl.shape[1], cd._count(n, device)
            top = _top_values(neg_pl, tail_size(k_neg, tail_frac, min_tail)) * tau_det

        # §2.3 per-anchor statistics; the pivot ρ_0 over every rank's anchors.
        tail = _anchor_tail_stats(
            top, q=q, kappa_rho=kappa_rho, kappa_aic=kappa_aic, margin=margin, eps=eps, rho_pool=cd.gather_no_grad
        )
        lam = tail.lam.to(dtype) if fixed_lambda is None else torch.full_like(tail.lam, fixed_lambda, dtype=dtype)

        beta_t: float | None = None
        estimate: tuple[float, float] | None = None
        neg_only: Tensor | None = None
        if beta_mode == "global_ema" or aux_top_m > 0:
            with torch.no_grad():  # the negatives alone, −inf elsewhere
                neg_only = cos.clone() if negatives is None else logits_pl.detach() * tau_det
                if self_cols is not None:
                    neg_only[rows, self_cols] = float("-inf")
                neg_only[rows, pos_index] = float("-inf")
            estimate = global_tail_beta_gathered(
                neg_only, tail_frac=global_beta.tail_frac, min_tail=global_beta.min_tail, eps=eps
            )
            beta_t = update_beta_ema(beta_prev, estimate, global_beta)
        if beta_mode == "per_anchor":
            beta = tail.beta_hat.to(dtype)
        elif beta_mode == "one":
            beta = torch.ones_like(lam)
        else:
            assert beta_t is not None
            beta = torch.full_like(lam, beta_t)

        # ℓ_ij = (1 − λ_i)·s_ij/τ + λ_iβ_i·(−log(1 − s_ij)), λ, β stop-gradient; a view is never its own candidate.
        lam_c, lam_beta = lam.unsqueeze(1), (lam * beta).unsqueeze(1)
        finite = logits_pl.masked_fill(torch.isinf(logits_pl), 0.0)
        logits = logits_pl * (1.0 - lam_c) + _weibit(finite / inv_t, eps) * lam_beta
        if self_cols is not None:
            logits = logits.index_put((rows, self_cols), torch.tensor(float("-inf"), dtype=dtype, device=device))
        loss = torch.logsumexp(logits, dim=1) - logits.gather(1, pos_index.unsqueeze(1)).squeeze(1)

        if aux_top_m > 0:  # the scripts' L_Weibit-topM + L_PL-topM over [positive | M hardest negatives]
            assert beta_t is not None and neg_only is not None
            top_idx = torch.topk(neg_only, k=min(aux_top_m, k_neg), dim=1).indices
            p_logits = torch.cat([logits_pl.gather(1, pos_index.unsqueeze(1)), logits_pl.gather(1, top_idx)], dim=1)
            w_logits = beta_t * _weibit(p_logits / inv_t, eps)
            aux = (torch.logsumexp(w_logits, dim=1) - w_logits[:, 0]) + (
                torch.logsumexp(p_logits, dim=1) - p_logits[:, 0]
            )
            loss = loss + aux_weight * aux

    out = check_finite_loss(cd._share(loss, count, reduction), "z_a/z_b")
    if not return_stats:
        return out
    stats = WEINCEStats(
        tail=tail,
        beta=beta.detach(),
        beta_ema=None if beta_t is None else torch.tensor(beta_t, dtype=torch.float64),
        beta_global_hat=None if estimate is None else estimate[0],
        beta_global_r2=None if estimate is None else estimate[1],
    )
    return out, stats
