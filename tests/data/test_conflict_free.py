import math
import random

import pytest
import torch

from contrastlab.data.conflict_free import ConflictFreeSampler, conflicts, false_negative_mask
from contrastlab.losses import info_nce


def _keys(n: int, dup_fraction: float, seed: int, protect: bool = False):
    """(own, protected) for n pairs: a fraction of the positives repeat an earlier pair's positive; with
    ``protect``, pairs come in query groups of 1-3 whose other positives are protected."""
    rng = random.Random(seed)
    own, prot = [], []
    q = 0
    while len(own) < n:
        size = rng.choice((1, 2, 3)) if protect else 1
        docs = []
        for _ in range(size):
            if own and rng.random() < dup_fraction:
                docs.append(rng.choice(own)[1])
            else:
                docs.append(("d", len(own), len(docs)))
        for d in docs:
            own.append((("q", q), d))
            prot.append(tuple(docs) if protect else ())
        q += 1
    return own[:n], prot[:n]


def _assert_conflict_free(batch, own, prot):
    for x in range(len(batch)):
        for y in range(x + 1, len(batch)):
            i, j = batch[x], batch[y]
            assert not conflicts(own[i], prot[i], own[j], prot[j]), (i, j)


@pytest.mark.parametrize("protect", [False, True])
@pytest.mark.parametrize("batch_size", [1, 4, 7])
def test_no_conflict_in_any_batch_and_every_row_once_per_epoch(protect, batch_size):
    own, prot = _keys(60, 0.3, seed=1, protect=protect)
    s = ConflictFreeSampler(own, batch_size, protected=prot, seed=3, drop_last=False)
    step = 0
    for epoch in range(3):
        seen = []
        for _ in range(s.batches_in_epoch(epoch)):
            batch = s.indices_at(step).tolist()
            _assert_conflict_free(batch, own, prot)
            assert 1 <= len(batch) <= batch_size
            seen += batch
            step += 1
        assert sorted(seen) == list(range(len(own)))  # every row exactly once in each epoch


def test_drop_last_keeps_only_full_batches_each_row_at_most_once():
    own, prot = _keys(50, 0.4, seed=2, protect=True)
    s = ConflictFreeSampler(own, 6, protected=prot, seed=0, drop_last=True)
    rows = [i for k in range(s.batches_in_epoch(0)) for i in s.indices_at(k).tolist()]
    assert all(len(s.indices_at(k)) == 6 for k in range(s.batches_in_epoch(0)))
    assert len(rows) == len(set(rows))


def test_resume_from_any_step_gives_the_same_batches():
    own, prot = _keys(40, 0.3, seed=4, protect=True)
    full = ConflictFreeSampler(own, 5, protected=prot, seed=7, drop_last=False)
    total = full.batches_in_epoch(0) + full.batches_in_epoch(1) + full.batches_in_epoch(2)
    ref = [full.indices_at(k).tolist() for k in range(total)]
    for start in (0, 3, full.batches_in_epoch(0), total - 1):
        fresh = ConflictFreeSampler(own, 5, protected=prot, seed=7, drop_last=False)  # a resumed run's sampler
        assert [fresh.indices_at(k).tolist() for k in range(start, total)] == ref[start:]


def test_epochs_differ_and_seed_matters():
    own, _ = _keys(40, 0.0, seed=0)
    a = ConflictFreeSampler(own, 8, seed=0)
    b = ConflictFreeSampler(own, 8, seed=1)
    assert a.indices_at(0).tolist() != a.indices_at(5).tolist()
    assert a.indices_at(0).tolist() != b.indices_at(0).tolist()


def test_without_conflicts_it_is_a_plain_partition_of_a_permutation():
    own = [(i,) for i in range(20)]
    s = ConflictFreeSampler(own, 5, seed=0)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0 * 1_000_003)).tolist()
    assert [s.indices_at(k).tolist() for k in range(4)] == [perm[5 * k : 5 * k + 5] for k in range(4)]


def test_impossible_batch_size_is_refused_naming_it():
    with pytest.raises(ValueError, match="batch_size"):
        ConflictFreeSampler([("x",)] * 5, 2, drop_last=True)  # one text five times: never two in a batch
    with pytest.raises(ValueError, match="batch_size"):
        ConflictFreeSampler([("x",)], 0)
    with pytest.raises(ValueError, match="protected"):
        ConflictFreeSampler([("x",), ("y",)], 1, protected=[()])


def test_mask_is_the_conflict_relation():
    own, prot = _keys(30, 0.4, seed=5, protect=True)
    mask = false_negative_mask(own, prot)
    for i in range(30):
        for j in range(30):
            want = i != j and conflicts(own[i], prot[i], own[j], prot[j])
            assert bool(mask[i, j]) == want


def _loss_without_columns(a, p, drop, tau):
    """ℓ_i = −s_ii/τ + log Σ_{j kept} e^{s_ij/τ}, written as a loop over the kept columns (float64)."""
    an = torch.nn.functional.normalize(a, dim=1)
    pn = torch.nn.functional.normalize(p, dim=1)
    total = 0.0
    for i in range(a.shape[0]):
        s = [float(an[i] @ pn[j]) / tau for j in range(a.shape[0]) if j == i or not drop[i][j]]
        total += -float(an[i] @ pn[i]) / tau + math.log(sum(math.exp(x) for x in s))
    return total / a.shape[0]


@pytest.mark.parametrize("tau", [0.05, 0.5])
def test_masked_loss_equals_the_loss_with_those_columns_removed(tau):
    own, prot = _keys(12, 0.5, seed=6, protect=True)
    mask = false_negative_mask(own, prot)
    assert mask.any()  # the case is not vacuous
    g = torch.Generator().manual_seed(0)
    a = torch.randn(12, 8, generator=g, dtype=torch.float64)
    p = a + 0.3 * torch.randn(12, 8, generator=g, dtype=torch.float64)
    got = info_nce(a, p, temperature=tau, weights=(~mask).double())
    want = _loss_without_columns(a, p, mask.tolist(), tau)
    assert abs(float(got) - want) <= 1e-10 * max(1.0, abs(want))
