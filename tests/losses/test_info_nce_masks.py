"""InfoNCE / DCL with ``positive_mask`` (extra positives, false negatives) and per-candidate ``weights``.

Checked against a loop written from the definition, ℓ_i = −log(Σ_{j∈P(i)} w_ij e^{S_ij} / Σ_{j∈C(i)} w_ij
e^{S_ij}), in float64 to 1e-10 (the loop and the kernels differ only in summation order), on the dense
and the tiled kernels; against the plain loss when nothing is masked; and by float64 gradcheck.
"""

import math

import pytest
import torch

from contrastlab.losses import info_nce

TAU = 0.3


def _data(n: int, m: int | None, seed: int):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 5, generator=g, dtype=torch.float64)
    p = a + 0.8 * torch.randn(n, 5, generator=g, dtype=torch.float64)
    negs = None if m is None else torch.randn(m, 5, generator=g, dtype=torch.float64)
    cols = n if m is None else m
    mask = torch.rand(n, cols, generator=g) < 0.25
    w = torch.rand(n, cols, generator=g, dtype=torch.float64) * 2.0
    w[torch.rand(n, cols, generator=g) < 0.15] = 0.0  # some candidates left out
    if m is None:
        w.diagonal().clamp_(min=0.5)  # every anchor keeps a positive of nonzero weight
    return a, p, negs, mask, w


def _masked(a, p, negs, mask, w, variant, **kw):
    """:func:`info_nce` at τ = ``TAU`` with ``positive_mask=mask`` and ``weights=w``."""
    return info_nce(a, p, negs, temperature=TAU, variant=variant, positive_mask=mask, weights=w, **kw)


def _cos(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(x @ y / (x.norm() * y.norm()))


def naive(a, p, negs, mask, w, variant):
    """The definition, one anchor and one candidate at a time."""
    n = a.shape[0]
    out = []
    for i in range(n):
        cands = []  # (logit, weight, is_positive)
        if negs is None:
            for j in range(n):
                is_pos = j == i or (mask is not None and bool(mask[i, j]))
                cands.append((_cos(a[i], p[j]) / TAU, 1.0 if w is None else float(w[i, j]), is_pos))
        else:
            cands.append((_cos(a[i], p[i]) / TAU, 1.0, True))
            for j in range(negs.shape[0]):
                is_pos = mask is not None and bool(mask[i, j])
                cands.append((_cos(a[i], negs[j]) / TAU, 1.0 if w is None else float(w[i, j]), is_pos))
        num = sum(wt * math.exp(s) for s, wt, pos in cands if pos)
        den = sum(wt * math.exp(s) for s, wt, pos in cands if variant == "infonce" or not pos)
        out.append(-math.log(num / den))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("mode", ["inbatch", "shared"])
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("use", ["mask", "weights", "both"])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_equals_the_naive_loop(mode, variant, use, chunk_size):
    a, p, negs, mask, w = _data(9, None if mode == "inbatch" else 7, seed=1)
    mask = mask if use in ("mask", "both") else None
    w = w if use in ("weights", "both") else None
    got = _masked(a, p, negs, mask, w, variant, reduction="none", chunk_size=chunk_size)
    torch.testing.assert_close(got, naive(a, p, negs, mask, w, variant), rtol=1e-10, atol=1e-12)
    mean = _masked(a, p, negs, mask, w, variant, chunk_size=chunk_size)
    torch.testing.assert_close(mean, got.mean(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("mode", ["inbatch", "shared"])
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
def test_nothing_masked_is_the_plain_loss(mode, variant):
    a, p, negs, _, _ = _data(8, None if mode == "inbatch" else 6, seed=2)
    cols = 8 if negs is None else 6
    plain = info_nce(a, p, negs, temperature=TAU, variant=variant, reduction="none")
    masked = info_nce(
        a,
        p,
        negs,
        temperature=TAU,
        variant=variant,
        reduction="none",
        positive_mask=torch.zeros(8, cols, dtype=torch.bool),
        weights=torch.ones(8, cols, dtype=torch.float64),
    )
    torch.testing.assert_close(masked, plain, rtol=1e-12, atol=1e-14)


def test_zero_weight_is_removing_the_negative():
    a, p, negs, _, _ = _data(6, 5, seed=3)
    w = torch.ones(6, 5, dtype=torch.float64)
    w[:, 2] = 0.0
    kept = torch.tensor([0, 1, 3, 4])
    torch.testing.assert_close(
        info_nce(a, p, negs, temperature=TAU, weights=w),
        info_nce(a, p, negs[kept], temperature=TAU),
        rtol=1e-12,
        atol=0,
    )


@pytest.mark.parametrize("mode", ["inbatch", "shared"])
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_gradcheck_float64(mode, variant, chunk_size):
    a, p, negs, mask, w = _data(4, None if mode == "inbatch" else 3, seed=4)
    if variant == "dcl" and mode == "inbatch":
        mask[:, :] = False  # keep a negative for every anchor
    leaves = [a.requires_grad_(), p.requires_grad_()] + ([] if negs is None else [negs.requires_grad_()])

    def fn(*xs):
        n = None if negs is None else xs[2]
        return _masked(xs[0], xs[1], n, mask, w, variant, reduction="none", chunk_size=chunk_size)

    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-7)


BAD = [
    ("positive_mask", TypeError, {"positive_mask": torch.ones(4, 4)}),  # float, not bool
    ("positive_mask", ValueError, {"positive_mask": torch.ones(4, 3, dtype=torch.bool)}),
    ("weights", ValueError, {"weights": -torch.ones(4, 4)}),
    ("weights", ValueError, {"weights": torch.full((4, 4), float("nan"))}),
    ("weights", TypeError, {"weights": torch.ones(4, 4, dtype=torch.long)}),
    ("weights", ValueError, {"weights": torch.zeros(4, 4)}),  # no positive of nonzero weight
    ("weights", ValueError, {"weights": torch.ones(4, 4), "symmetric": True}),
    ("positive_mask", ValueError, {"positive_mask": torch.ones(4, 4, dtype=torch.bool), "variant": "dcl"}),
    ("weights", ValueError, {"weights": torch.ones(4, 2), "negatives": torch.randn(4, 2, 3)}),
]


@pytest.mark.parametrize("name,exc,kw", BAD)
def test_bad_masks_and_weights_name_the_argument(name, exc, kw):
    a = torch.randn(4, 3)
    with pytest.raises(exc) as info:
        info_nce(a, a + 0.1, **kw)
    assert str(info.value).startswith(name), str(info.value)
