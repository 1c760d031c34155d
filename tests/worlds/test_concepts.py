"""Tests of the concept world: Zipf frequencies, tree positives, ambiguity, purity of the batch source."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from contrastlab.worlds.concepts import ConceptWorld


def _anchor_counts(world: ConceptWorld, steps: int, batch: int, seed: int) -> np.ndarray:
    source = world.batch_source(batch_size=batch, seed=seed)
    anchors = torch.cat([source(t).anchor for t in range(steps)])
    return np.bincount(anchors.numpy(), minlength=world.n_items)


def test_tree_shape_and_depths() -> None:
    world = ConceptWorld(branching=3, depth=3, seed=0)
    assert world.n_items == 3 + 9 + 27
    assert np.bincount(world.depth_of)[1:].tolist() == [3, 9, 27]
    assert world.is_leaf.sum() == 27
    for i in range(world.n_items):
        p = world.parent[i]
        assert (p == -1) == (world.depth_of[i] == 1)
        if p >= 0:
            assert world.depth_of[p] == world.depth_of[i] - 1


def test_zipf_frequencies_chi_square() -> None:
    """Anchor counts follow p_i ∝ rank^-s (chi-square at a fixed seed), and a wrong exponent is rejected."""
    world = ConceptWorld(branching=3, depth=2, zipf_exponent=1.1, seed=3)
    ranks = world.rank.astype(np.float64)
    expected = ranks**-1.1 / (ranks**-1.1).sum()
    np.testing.assert_allclose(world.frequency, expected, rtol=1e-12)
    counts = _anchor_counts(world, steps=100, batch=400, seed=7)
    n = counts.sum()
    assert stats.chisquare(counts, expected * n).pvalue > 0.01
    wrong = ranks**-0.8 / (ranks**-0.8).sum()
    assert stats.chisquare(counts, wrong * n).pvalue < 1e-6  # the test has power


def test_generic_nodes_draw_positives_from_all_descendants() -> None:
    world = ConceptWorld(branching=2, depth=3, zipf_exponent=0.0, seed=1)
    source = world.batch_source(batch_size=2000, seed=0)
    seen: dict[int, set[int]] = {i: set() for i in range(world.n_items)}
    for t in range(5):
        b = source(t)
        for a, p in zip(b.anchor.tolist(), b.positive.tolist(), strict=True):
            seen[a].add(p)
    for i in range(world.n_items):
        if world.is_leaf[i]:
            assert seen[i] == {i}
        else:
            # every descendant (internal and leaf), and nothing else
            desc = {j for j in range(world.n_items) if _is_ancestor(world, i, j)}
            assert seen[i] == desc
            assert len(desc) == sum(world.branching**k for k in range(1, world.depth - world.depth_of[i] + 1))


def _is_ancestor(world: ConceptWorld, i: int, j: int) -> bool:
    p = world.parent[j]
    while p >= 0:
        if p == i:
            return True
        p = world.parent[p]
    return False


def test_ambiguity_mixes_partner_positives_at_the_stated_rate() -> None:
    world = ConceptWorld(branching=3, depth=2, zipf_exponent=0.0, ambiguous_fraction=1.0, max_ambiguity=0.6, seed=2)
    assert np.all(world.ambiguity > 0) and np.all(world.ambiguity <= 0.6)
    assert np.all(world.partner != np.arange(world.n_items))
    assert np.all(world.depth_of[world.partner] == world.depth_of)
    leaf = int(np.flatnonzero(world.is_leaf)[0])  # a leaf's own positive is itself: the flip is observable
    g = torch.Generator().manual_seed(0)
    hits = total = 0
    for _ in range(20):
        b = world.sample(3000, generator=g)
        mask = b.anchor == leaf
        total += int(mask.sum())
        hits += int((b.positive[mask] == int(world.partner[leaf])).sum())
    rate, alpha = hits / total, world.ambiguity[leaf]
    assert abs(rate - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / total)


def test_batch_source_is_pure_and_views_are_noisy_features() -> None:
    world = ConceptWorld(branching=2, depth=2, view_noise=0.1, seed=0)
    source = world.batch_source(batch_size=8, seed=5, views=True)
    a, b = source(3), source(3)
    assert torch.equal(a.anchor, b.anchor) and torch.equal(a.x_anchor, b.x_anchor)
    assert not torch.equal(source(4).x_anchor, a.x_anchor)
    resid = a.x_anchor - world.features[a.anchor]
    assert 0.05 < float(resid.std()) < 0.2
    assert a.x_positive is not None and a.x_positive.shape == (8, world.input_dim)


def test_features_follow_the_tree() -> None:
    world = ConceptWorld(branching=3, depth=3, seed=0)
    f = world.features
    leaves = np.flatnonzero(world.is_leaf)
    grand = world.parent[world.parent]
    pairs = [(i, j) for i in leaves for j in leaves if i < j]
    sib = [float((f[i] - f[j]).norm()) for i, j in pairs if world.parent[i] == world.parent[j]]
    far = [float((f[i] - f[j]).norm()) for i, j in pairs if grand[i] != grand[j]]
    assert np.mean(sib) < np.mean(far)


def test_feature_norm_equalises_inputs_and_keeps_the_tree() -> None:
    plain = ConceptWorld(branching=3, depth=3, seed=4)
    fixed = ConceptWorld(branching=3, depth=3, feature_norm=2.0, seed=4)
    torch.testing.assert_close(fixed.features.norm(dim=1), torch.full((39,), 2.0))
    cos = torch.nn.functional.cosine_similarity(plain.features, fixed.features, dim=1)
    torch.testing.assert_close(cos, torch.ones(39))
    assert plain.features[plain.is_leaf].norm(dim=1).mean() > plain.features[~plain.is_leaf].norm(dim=1).mean()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"branching": 1}, "branching"),
        ({"depth": 0}, "depth"),
        ({"zipf_exponent": -1.0}, "zipf_exponent"),
        ({"max_ambiguity": 1.5}, "max_ambiguity"),
        ({"view_noise": -0.1}, "view_noise"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=f"^{name}"):
        ConceptWorld(**kwargs)
