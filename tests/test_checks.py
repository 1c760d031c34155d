"""contrastlab._checks: the one-read finiteness test agrees with torch.isfinite everywhere."""

from __future__ import annotations

import pytest
import torch

from contrastlab._checks import all_finite, check_embeddings


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [(0, 0), (3, 5), (-1, -1)])
def test_all_finite_finds_every_non_finite_entry(dtype, bad, where):
    x = torch.randn(7, 9).to(dtype)
    assert all_finite(x)
    x[where] = bad
    assert not all_finite(x)
    assert not bool(torch.isfinite(x).all())
    with pytest.raises(ValueError, match="^z contains NaN or Inf"):
        check_embeddings("z", x, ndim=2)


def test_all_finite_edge_cases():
    assert all_finite(torch.empty(0, 4))
    assert all_finite(torch.full((3, 2), torch.finfo(torch.float32).max))  # huge but finite
    assert all_finite(torch.tensor([[-torch.finfo(torch.float32).max, torch.finfo(torch.float32).max]]))
    x = torch.randn(4, 6)[:, ::2]  # a non-contiguous view
    assert all_finite(x)
    x[1, 1] = float("nan")
    assert not all_finite(x)
