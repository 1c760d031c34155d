"""The one-sweep masked / weighted InfoNCE kernel: its gradients, made ahead or recomputed, and its fallback.

The loss values of the kernel are checked against the naive loop in ``test_info_nce_masks.py`` (the
no-backward and the mean paths take it); here, in float64: the gradient of a mean (made in the forward)
equals the gradient of the same loss through the general path (``reduction="none"`` keeps the logits),
the recomputed gradient for unequal upstream row gradients passes gradcheck, and a row without a
negative makes the kernel hand back to the general path.
"""

import pytest
import torch

from contrastlab.losses import info_nce, masked_ratio, tiled
from contrastlab.losses.masked_ratio import masked_log_ratio

TAU = 0.3


def _data(n: int, seed: int, density: float = 0.2):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 6, generator=g, dtype=torch.float64)
    p = a + 0.7 * torch.randn(n, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(n, n, generator=g) < density
    w = torch.rand(n, n, generator=g, dtype=torch.float64) * 3.0
    w[torch.rand(n, n, generator=g) < 0.1] = 0.0
    w.diagonal().clamp_(min=0.5)
    return a, p, mask, w


@pytest.mark.parametrize("density", [0.2, 0.03])  # a masked copy of each block; a list of entries
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("use", ["mask", "weights", "both"])
def test_mean_gradient_equals_the_general_path(variant, use, density):
    a, p, mask, w = _data(40, seed=5, density=density)
    kw = {"positive_mask": mask if use != "weights" else None, "weights": w if use != "mask" else None}
    grads = []
    for reduction in ("mean", "none"):  # "none" + mean keeps the logits: the two-sweep general path
        x, y = a.clone().requires_grad_(), p.clone().requires_grad_()
        loss = info_nce(x, y, temperature=TAU, variant=variant, reduction=reduction, **kw)
        loss.mean().backward()
        grads.append((float(loss.detach().mean()), x.grad, y.grad))
    (l1, ga1, gp1), (l2, ga2, gp2) = grads
    assert abs(l1 - l2) <= 1e-12 * abs(l2)
    torch.testing.assert_close(ga1, ga2, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(gp1, gp2, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["random", "duplicates"])  # a masked copy of each block; a list of entries
@pytest.mark.parametrize("variant", ["infonce", "dcl"])
@pytest.mark.parametrize("use", ["mask", "weights", "both"])
def test_several_ragged_blocks_equal_one_block(monkeypatch, variant, use, kind):
    """Blocks of 3 rows (6 when E is the only block), neither dividing N = 160: loss and gradients unchanged."""
    n = 160
    a, p, mask, w = _data(n, seed=9)
    if kind == "duplicates":  # rows 2i and 2i + 1 share a label: few enough 8-column words for the entry list
        label = torch.arange(n) // 2
        mask = label[:, None] == label[None, :]
        assert masked_ratio._mask_entries(mask, 0) is not None
    mask = mask if use != "weights" else None
    w = w if use != "mask" else None
    dcl = variant == "dcl"
    if dcl and mask is not None and kind == "random":
        mask[:, 0] = False  # keep a negative in every row
    results = []
    for block_bytes in (masked_ratio._BLOCK_BYTES, 3 * n * 8):  # float64 rows of n candidates
        monkeypatch.setattr(masked_ratio, "_BLOCK_BYTES", block_bytes)
        for row_w in (torch.ones(n, dtype=torch.float64), torch.linspace(0, 2, n, dtype=torch.float64)):
            q = tiled.normalize_scale(a, 1 / TAU).detach().requires_grad_()  # equal row weights: the gradient
            k = tiled.normalize_scale(p).detach().requires_grad_()  # made ahead; unequal: recomputed
            out = masked_log_ratio(q, k, positive_mask=mask, weights=w, dcl=dcl, diagonal=(q * k).sum(dim=1))
            assert out is not None
            (out * row_w).sum().backward()
            results.append((out.detach(), q.grad, k.grad))
    for one, several in zip(results[:2], results[2:], strict=True):
        for u, v in zip(one, several, strict=True):
            torch.testing.assert_close(v, u, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("density", [0.3, 0.06])  # 0.06: one or two entries of 25, the list of entries
@pytest.mark.parametrize("dcl", [False, True])
@pytest.mark.parametrize("use", ["mask", "weights", "both"])
def test_gradcheck_with_unequal_row_gradients(dcl, use, density):
    a, p, mask, w = _data(5, seed=6, density=density)
    mask = mask if use != "weights" else None
    w = w if use != "mask" else None
    if dcl and mask is not None:
        mask[:, 0] = False  # keep a negative in every row
    q = tiled.normalize_scale(a, 1 / TAU).detach().requires_grad_()
    k = tiled.normalize_scale(p).detach().requires_grad_()

    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        pos = (q * k).sum(dim=1)
        out = masked_log_ratio(q, k, positive_mask=mask, weights=w, dcl=dcl, diagonal=pos)
        assert out is not None
        return out  # gradcheck sends one-hot upstream gradients: rows weighted unequally

    assert torch.autograd.gradcheck(fn, (q, k), eps=1e-6, atol=1e-7)


def test_a_row_without_negative_hands_back_to_the_general_path():
    a, p, _, _ = _data(4, seed=7)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[2] = True  # row 2: every candidate a positive, so DCL has no negative left
    q, k = tiled.normalize_scale(a, 1 / TAU), tiled.normalize_scale(p)
    assert masked_log_ratio(q, k, positive_mask=mask, weights=None, dcl=True, diagonal=(q * k).sum(1)) is None
    with pytest.raises(ValueError, match="^positive_mask"):
        info_nce(a, p, temperature=TAU, variant="dcl", positive_mask=mask)


@pytest.mark.parametrize("variant", ["infonce", "dcl"])
def test_duplicates_as_a_list_of_entries_read_by_words(variant):
    """N = 160, rows 2i and 2i + 1 duplicates: the mask's 8-column words are few enough for the entry list."""
    a, p, _, _ = _data(160, seed=8)
    label = torch.arange(160) // 2
    mask = label[:, None] == label[None, :]
    rows, cols = masked_ratio._mask_entries(mask, 0)
    assert torch.equal(cols, rows ^ 1)  # exactly the duplicates, own positives left out
    grads = []
    for reduction in ("mean", "none"):
        x, y = a.clone().requires_grad_(), p.clone().requires_grad_()
        loss = info_nce(x, y, temperature=TAU, variant=variant, reduction=reduction, positive_mask=mask).mean()
        loss.backward()
        grads.append((loss.detach(), x.grad, y.grad))
    for got, want in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-13)


def _sparse_mask(kind):
    g = torch.Generator().manual_seed(len(kind))
    if kind == "duplicates":  # rows 2i and 2i + 1 share a label, at a size where the groups are sparse
        label = torch.arange(2048) // 2
        return label[:, None] == label[None, :]
    if kind.startswith("few"):  # a handful of entries in a (128, 256) mask
        mask = torch.zeros(128, 256, dtype=torch.bool)
        count = int(kind[3:])
        mask[torch.randint(0, 128, (count,), generator=g), torch.randint(0, 256, (count,), generator=g)] = True
        return mask
    if kind == "empty":
        return torch.zeros(64, 64, dtype=torch.bool)
    if kind == "dense":
        return torch.rand(64, 128, generator=g) < 0.3
    return torch.rand(160, 160, generator=g) < 0.002  # 20 words per row: not a multiple of 8 groups


@pytest.mark.parametrize("kind", ["duplicates", "few5", "few40", "empty", "dense", "odd"])
def test_grouped_nonzero_words_equal_nonzero(kind):
    """The grouped reading of the mask's words returns exactly ``words.nonzero()``, or None past the limit."""
    mask = _sparse_mask(kind)
    words = mask.view(torch.int64)
    limit = mask.numel() // (8 * masked_ratio._SPARSE_FRACTION)
    want = words.nonzero()
    got = masked_ratio._nonzero_words(words, limit)
    if want.shape[0] > limit:
        assert got is None
    else:
        assert got is not None and torch.equal(got, want)
