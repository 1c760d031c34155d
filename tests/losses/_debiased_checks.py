"""The checks that the debiased and the hard-negative losses' tests both make.

Each takes the test's ``loss(a, p, negs, layout, **kw)``: the loss function with ``simclr`` set from the
layout.
"""

import torch

from tests.losses.reference import debiased_loop

#: τ of the comparisons with the loop: every e^{(1+β)S} of the loop (β ≤ 2) stays within float64's range.
TAU = 0.5


def assert_matches_loop(loss, a, p, negs, layout: str, *, normalize: bool = True, **kw) -> list[bool]:
    """``loss``'s per-row losses at τ = :data:`TAU` equal the paper loop's to 1e-10 relative (float64).

    ``kw`` holds ``tau_plus`` and, for the hard-negative loss, ``beta`` (the loop's β, else 0); returns
    the loop's per-row flags of where the clamp bound.
    """
    simclr = layout == "simclr"
    want, clamped = debiased_loop(a, p, negs, TAU, kw["tau_plus"], kw.get("beta", 0.0), simclr, normalize)
    got = loss(a, p, negs, layout, temperature=TAU, normalize=normalize, reduction="none", **kw)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10, atol=0)
    return clamped


def assert_dense_equals_tiled(loss, a, p, negs, layout: str, **kw) -> None:
    """The loss and the gradients of ``a`` and ``p`` on the dense path equal the tiled path's (tiles of 4)."""
    out = []
    for chunk_size in (None, 4):
        x, y = a.clone().requires_grad_(), p.clone().requires_grad_()
        value = loss(x, y, negs, layout, chunk_size=chunk_size, **kw)
        value.backward()
        out.append((value.detach(), x.grad, y.grad))
    for got, want in zip(out[1], out[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)


def assert_gradcheck(loss, a, p, negs, layout: str, **kw) -> None:
    """Float64 gradcheck of the per-row losses in the embeddings and in a learnable τ = 0.4."""
    leaves = [a.requires_grad_(), p.requires_grad_()] + ([] if negs is None else [negs.requires_grad_()])
    leaves.append(torch.tensor(0.4, dtype=torch.float64, requires_grad=True))

    def fn(*xs):
        n = xs[2] if negs is not None else None
        return loss(xs[0], xs[1], n, layout, temperature=xs[-1], reduction="none", **kw)

    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-7)
