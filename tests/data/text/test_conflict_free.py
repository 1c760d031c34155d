import random

import pytest
import torch

from contrastlab.data.text.conflict_free import ConflictFreeSampler, conflicts, false_negative_mask
from contrastlab.losses import info_nce
from tests.data.text.dropped_columns import loss_without_columns


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


def _shared_relevance(n: int, seed: int):
    """(anchors, positives, relevant) of n rows, one row per (query, relevant document): each query has 1-3
    documents drawn from a pool of n / 2, so queries share some documents and not others (a query with two
    documents of which only one is relevant to another query); now and then a document is an earlier
    query's text."""
    rng = random.Random(seed)
    pool = [("d", k) for k in range(n // 2)]
    anchors, positives, relevant = [], [], []
    q = 0
    while len(anchors) < n:
        docs = rng.sample(pool, rng.choice((1, 2, 3)))
        if q and rng.random() < 0.15:
            docs[0] = ("q", rng.randrange(q))
        for d in docs:
            anchors.append(("q", q))
            positives.append(d)
            relevant.append(tuple(docs))
        q += 1
    return anchors[:n], positives[:n], relevant[:n]


def _false_negatives(anchors, positives, relevant):
    """The rule, written as a loop: column j is a false negative of anchor i (j ≠ i) when row j's positive
    is anchor i's text, anchor i's own positive, or another document relevant to anchor i."""
    n = len(anchors)
    return [
        [j != i and (positives[j] == anchors[i] or positives[j] == positives[i] or positives[j] in relevant[i])
         for j in range(n)]
        for i in range(n)
    ]  # fmt: skip


def test_mask_is_per_anchor_a_true_negative_of_the_other_row_stays():
    # A is relevant to p1 and p2, B to p2 only: p2 is a false negative of A, p1 a true negative of B
    rows = [("A", "p1"), ("A", "p2"), ("B", "p2"), ("C", "A")]  # C's document is A's text
    relevant = [("p1", "p2"), ("p1", "p2"), ("p2",), ("A",)]
    mask = false_negative_mask([a for a, _ in rows], [p for _, p in rows], relevant)
    assert mask.tolist() == [
        [False, True, True, True],  # (A, p1): p2 twice, and A's own text
        [True, False, True, True],  # (A, p2): p1, p2 (its own positive's text), and A's own text
        [False, True, False, False],  # (B, p2): p2 is its positive's text; p1 is a true negative of B
        [False, False, False, False],  # (C, A): nothing relevant to C
    ]


def test_mask_is_each_anchors_false_negatives_entry_by_entry():
    asymmetric = 0
    for seed in range(12):  # 12 batches of 20 rows
        anchors, positives, relevant = _shared_relevance(20, seed)
        mask = false_negative_mask(anchors, positives, relevant).tolist()
        assert mask == _false_negatives(anchors, positives, relevant)
        asymmetric += sum(mask[i][j] and not mask[j][i] for i in range(20) for j in range(20))
    assert asymmetric > 0  # the batches hold false negatives of one anchor that are true negatives of the other


def test_mask_refuses_keys_that_do_not_line_up_naming_them():
    with pytest.raises(ValueError, match="anchors"):
        false_negative_mask([], [])
    with pytest.raises(ValueError, match="positives"):
        false_negative_mask(["a", "b"], ["x"])
    with pytest.raises(ValueError, match="relevant"):
        false_negative_mask(["a", "b"], ["x", "y"], [("x",)])


def test_sampler_batches_hold_no_false_negative_of_any_anchor():
    anchors, positives, relevant = _shared_relevance(60, seed=3)
    own = list(zip(anchors, positives, strict=True))
    s = ConflictFreeSampler(own, 6, protected=relevant, seed=2, drop_last=False)
    for k in range(2 * s.batches_in_epoch(0)):
        b = s.indices_at(k).tolist()
        fn = _false_negatives([anchors[i] for i in b], [positives[i] for i in b], [relevant[i] for i in b])
        assert not any(map(any, fn)), b


@pytest.mark.parametrize("tau", [0.05, 0.5])
def test_masked_loss_equals_the_loss_without_each_anchors_false_negatives(tau):
    g = torch.Generator().manual_seed(0)
    for seed in range(12):
        anchors, positives, relevant = _shared_relevance(20, seed)
        mask = false_negative_mask(anchors, positives, relevant)
        a = torch.randn(20, 8, generator=g, dtype=torch.float64)
        p = a + 0.3 * torch.randn(20, 8, generator=g, dtype=torch.float64)
        got = info_nce(a, p, temperature=tau, weights=(~mask).double())
        want = loss_without_columns(a, p, _false_negatives(anchors, positives, relevant), tau)
        assert abs(float(got) - want) <= 1e-12 * max(1.0, abs(want)), seed
