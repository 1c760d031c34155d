"""contrastlab._checks: the one-read finiteness test agrees with torch.isfinite everywhere."""

from __future__ import annotations

import numpy as np
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


# ---------------------------------------------------------------- one integer check for the whole package


def test_check_int_and_check_real():
    from contrastlab._checks import check_int, check_real

    assert check_int("n", 3) == 3 and check_int("n", np.int64(3), 1) == 3
    with pytest.raises(TypeError, match="^n must be an int, got str"):
        check_int("n", "3")
    with pytest.raises(TypeError, match="^n must be an int, got bool"):
        check_int("n", True)
    with pytest.raises(TypeError, match="^n must be an int, got float"):
        check_int("n", 3.0)
    with pytest.raises(ValueError, match="^n must be >= 1, got 0"):
        check_int("n", 0, 1)
    assert check_real("x", 2) == 2.0 and check_real("x", np.float32(0.5)) == 0.5
    with pytest.raises(TypeError, match="^x must be a real number, got str"):
        check_real("x", "3")
    with pytest.raises(ValueError, match="^x must be finite"):
        check_real("x", float("nan"))


def _int_arguments():
    """Public entry points of different modules, each given the string "3" where an int is expected."""
    from contrastlab.eval.probe import knn_accuracy
    from contrastlab.losses import WEINCELoss
    from contrastlab.search.index import EmbeddingIndex
    from contrastlab.worlds.mixing import LinearMixing

    f = torch.randn(6, 3)
    y = torch.arange(6) % 2
    return [
        ("latent_dim", lambda: LinearMixing("3")),
        ("dim", lambda: EmbeddingIndex("3")),
        ("chunk_size", lambda: knn_accuracy(f, y, f, y, k=1, chunk_size="3")),
        ("min_tail", lambda: WEINCELoss(min_tail="3")),
        ("aux_top_m", lambda: WEINCELoss(aux_top_m="3")),
    ]


@pytest.mark.parametrize("i", range(5))
def test_the_string_3_is_a_type_error_everywhere(i):
    name, fn = _int_arguments()[i]
    with pytest.raises(TypeError, match=f"^{name} must be an int, got str"):
        fn()
