"""One property test over every entry of ``contrastlab.losses.LOSSES``.

For each loss: a finite scalar; a gradient on both views; invariance under permuting the rows of both
views together (and of everything row-aligned with them); invariance under scaling the inputs (every
registered loss normalises its rows); and the bad-input contract (a named ``TypeError``/``ValueError``).
Invariances are checked in float64, where the only difference is the order of the sums: 1e-10
relative is far above that rounding (~1e-15 per term) and far below any real change of the loss.
"""

from collections.abc import Callable

import pytest
import torch

from contrastlab.losses import LOSSES

N, D, K = 12, 6, 5
DISTILLATION = ("margin_mse", "distill_kl")
"""The losses that fit a teacher's scores (``teacher_scores``, not an embedding: never scaled or truncated)."""


def _inputs(name: str, seed: int) -> dict[str, torch.Tensor]:
    """Row-aligned float64 inputs of the loss ``name``: two views, and labels or negatives where it needs them."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(N, D, generator=g, dtype=torch.float64)
    t = {"a": a, "b": a + 0.5 * torch.randn(N, D, generator=g, dtype=torch.float64)}
    if name == "supcon":
        t["y"] = torch.arange(N) % 4  # three samples per class
    if name in ("support_corrected", *DISTILLATION):
        t["neg"] = torch.randn(N, K, D, generator=g, dtype=torch.float64)
    if name in DISTILLATION:
        t["teacher"] = torch.randn(N, 1 + K, generator=g, dtype=torch.float64)
    return t


def _call(name: str, t: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    """The loss ``name`` on ``t``: supcon sees both views as samples with their labels."""
    fn: Callable = LOSSES[name]
    if name == "supcon":
        return fn(torch.cat([t["a"], t["b"]]), torch.cat([t["y"], t["y"]]), **kw)
    if name == "support_corrected":
        return fn(t["a"], t["b"], t["neg"], **kw)
    if name in DISTILLATION:  # cosine scores, so that the loss ignores the inputs' scale as the others do
        return fn(t["a"], t["b"], t["neg"], teacher_scores=t["teacher"], **{"normalize": True, **kw})
    if name == "weince":
        kw.setdefault("min_tail", 8)  # 2N − 2 = 22 negatives per view: an 11-point tail
    return fn(t["a"], t["b"], **kw)


NAMES = sorted(LOSSES)


def test_registry_is_a_plain_dict_of_callables():
    assert type(LOSSES) is dict and NAMES and all(callable(f) for f in LOSSES.values())


@pytest.mark.parametrize("name", NAMES)
def test_finite_scalar_with_gradients_on_both_views(name):
    t = _inputs(name, seed=0)
    leaves = {k: v.requires_grad_() if v.is_floating_point() else v for k, v in t.items()}
    loss = _call(name, leaves)
    assert loss.ndim == 0 and loss.dtype == torch.float64 and bool(torch.isfinite(loss))
    loss.backward()
    for k in ("a", "b"):
        g = leaves[k].grad
        assert g is not None and bool(torch.isfinite(g).all()) and float(g.abs().max()) > 0, k


@pytest.mark.parametrize("name", NAMES)
def test_invariant_to_permuting_rows_of_both_views(name):
    t = _inputs(name, seed=1)
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(2))
    permuted = {k: v[perm] for k, v in t.items()}
    torch.testing.assert_close(_call(name, permuted), _call(name, t), rtol=1e-10, atol=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scale", [1e-3, 7.0])
def test_invariant_to_scaling_the_inputs(name, scale):
    t = _inputs(name, seed=3)
    scaled = {k: v * scale if v.is_floating_point() and k != "teacher" else v for k, v in t.items()}
    torch.testing.assert_close(_call(name, scaled), _call(name, t), rtol=1e-10, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_per_row_reduction_matches_the_mean(name):
    t = _inputs(name, seed=4)
    per = _call(name, t, reduction="none")
    mean = _call(name, t)
    if name == "supcon":  # anchors without a positive hold 0 and are left out of the mean; here none
        assert bool((per > 0).all())
    torch.testing.assert_close(per.mean(), mean, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_raise_named_errors(name):
    t = _inputs(name, seed=5)
    first = "embeddings" if name == "supcon" else "z_a" if name in ("nt_xent", "weince") else "anchor"
    nan = {**t, "a": t["a"].clone()}
    nan["a"][1, 2] = float("nan")
    with pytest.raises(ValueError, match=f"^{first} contains NaN or Inf"):
        _call(name, nan)
    as_list = {**t, "a": t["a"].tolist()}
    if name != "supcon":  # supcon's first argument is built from both views by torch.cat here
        with pytest.raises(TypeError, match=f"^{first} must be a torch.Tensor"):
            _call(name, as_list)
    with pytest.raises(ValueError, match="^reduction"):
        _call(name, t, reduction="avg")
    with pytest.raises(TypeError, match="^temperature"):
        _call(name, t, temperature="0.1")
    with pytest.raises(ValueError, match="^temperature"):
        _call(name, t, temperature=0.0)
    with pytest.raises(TypeError, match="^gather"):
        _call(name, t, gather=1)
