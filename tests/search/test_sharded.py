"""Sharded search in one process: merged top-k, log-partition, probabilities, entropy and mining equal one corpus."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contrastlab.search import EmbeddingIndex, entropy, log_partition, log_prob
from contrastlab.search.mining import mine_hard_negatives
from contrastlab.search.sharded import TIE_MARGIN, ShardedSearch, exact_topk, merge_log_partitions
from contrastlab.search.softmax import SoftmaxSearch
from tests.search.test_mining import _world as mining_world
from tests.search.test_mining import sentence_transformers_negatives


def _split(ids: np.ndarray, emb: np.ndarray, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    assert sum(sizes) == ids.shape[0]
    cuts = np.cumsum([0, *sizes])
    return [(ids[a:b], emb[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _brute_topk(queries: np.ndarray, emb: np.ndarray, ids: np.ndarray, k: int, excl: np.ndarray | None = None):
    """Per query: every score, sorted by (score descending, id ascending), the excluded id dropped."""
    s = queries.astype(np.float64) @ emb.astype(np.float64).T
    out = []
    for i in range(queries.shape[0]):
        order = np.lexsort((ids, -s[i]))
        row = [int(ids[j]) for j in order if excl is None or ids[j] != excl[i]]
        out.append(row[:k])
    return np.array(out)


def _tied_world(seed: int = 0, n: int = 300, d: int = 4):
    """Integer vectors in {-1, 0, 1}^d: every inner product is an exact small integer, so ties are exact."""
    rng = np.random.default_rng(seed)
    emb = rng.integers(-1, 2, size=(n, d)).astype(np.float32)
    ids = rng.permutation(n).astype(np.int64) * 7 + 3  # ids are not row positions
    queries = rng.integers(-1, 2, size=(25, d)).astype(np.float32)
    return ids, emb, queries


SIZES = [1, 37, 100, 2, 160]  # a one-row shard, shards smaller than k, uneven ones


@pytest.mark.parametrize("k", [1, 5, 40, 299])
def test_topk_with_exact_ties_is_ordered_by_score_then_id(k: int) -> None:
    ids, emb, queries = _tied_world()
    sharded = ShardedSearch.local(_split(ids, emb, SIZES), metric="ip")
    res = sharded.search(queries, k, batch_size=8)
    want = _brute_topk(queries, emb, ids, k)
    np.testing.assert_array_equal(res.ids, want)
    assert len(np.unique(res.scores)) < res.scores.size // 2  # the data really is tied
    # positions number the rows shard after shard, as in the concatenated corpus
    np.testing.assert_array_equal(ids[res.positions], res.ids)
    # the flat reference: one shard holding everything, the same tie rule
    flat = EmbeddingIndex(4, metric="ip")
    flat.add(emb, ids=ids)
    _, flat_ids, _ = exact_topk(flat, queries, k)
    np.testing.assert_array_equal(flat_ids, want)


def _counting(index: EmbeddingIndex) -> list[int]:
    depths: list[int] = []
    search = index.search

    def spy(queries, k, **kw):
        depths.append(k)
        return search(queries, k, **kw)

    index.search = spy  # type: ignore[method-assign]
    return depths


def test_a_tie_within_the_margin_costs_no_second_search() -> None:
    # rows 3, 17 and 90 are one vector: per query, k is set so that the tie straddles the k-th place
    rng = np.random.default_rng(4)
    emb = rng.normal(size=(200, 8)).astype(np.float32)
    emb[[17, 90]] = emb[3]
    ids = np.arange(200, dtype=np.int64)[::-1].copy()  # the copy at row 90 has the smallest id of the three
    index = EmbeddingIndex(8, metric="ip")
    index.add(emb, ids=ids)
    for query in rng.normal(size=(6, 1, 8)).astype(np.float32):
        # the reference: faiss's own scores of every row for this one query, ordered (score desc, id asc)
        full = index.search(query, 200)
        order = list(full.ids[0][np.lexsort((full.ids[0], -full.scores[0]))])
        k = order.index(ids[90]) + 1  # the first copy is the k-th; the other two (equal scores) follow it
        assert (full.scores[0] == full.scores[0][full.ids[0] == ids[90]]).sum() == 3  # the copies tie, only they
        depths = _counting(index)
        _, got, _ = exact_topk(index, query, k)
        assert depths == [min(k + TIE_MARGIN, 200)]
        np.testing.assert_array_equal(got[0], order[:k])
        del index.search  # the spy: back to the class's method


def test_more_equal_scores_than_the_margin_search_deeper_until_the_tie_ends() -> None:
    ids, emb, queries = _tied_world(n=600)  # about 600 / 9 rows per integer score: ties far wider than the margin
    index = EmbeddingIndex(4, metric="ip")
    index.add(emb, ids=ids)
    depths = _counting(index)
    _, got, _ = exact_topk(index, queries, 5)
    assert len(depths) > 1 and depths[1] == 2 * depths[0]
    np.testing.assert_array_equal(got, _brute_topk(queries, emb, ids, 5))


def test_topk_excluding_an_id_per_query() -> None:
    ids, emb, queries = _tied_world(1)
    excl = ids[np.random.default_rng(5).integers(0, ids.shape[0], size=queries.shape[0])]
    res = ShardedSearch.local(_split(ids, emb, SIZES), metric="ip").search(queries, 7, exclude_ids=excl)
    np.testing.assert_array_equal(res.ids, _brute_topk(queries, emb, ids, 7, excl))


@pytest.mark.parametrize("metric", ["cosine", "ip"])
def test_random_float_shards_equal_one_flat_index(metric: str) -> None:
    rng = np.random.default_rng(2)
    emb = rng.normal(size=(500, 16)).astype(np.float32)
    ids = np.arange(500, dtype=np.int64)
    queries = rng.normal(size=(30, 16)).astype(np.float32)
    sharded = ShardedSearch.local(_split(ids, emb, [120, 80, 300]), metric=metric)
    flat = EmbeddingIndex(16, metric=metric)
    flat.add(emb)
    res, ref = sharded.search(queries, 10), flat.search(queries, 10)
    np.testing.assert_array_equal(res.ids, ref.ids)
    np.testing.assert_array_equal(res.scores, ref.scores)  # same faiss arithmetic per (query, item)


def _float_world(dtype: np.dtype, seed: int = 3):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(400, 12)).astype(dtype)
    queries = rng.normal(size=(9, 12)).astype(dtype)
    ids = rng.permutation(400).astype(np.int64)
    return ids, emb, queries


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-6)])
def test_log_partition_probabilities_and_entropy_equal_one_process(dtype: np.dtype, tol: float) -> None:
    ids, emb, queries = _float_world(dtype)
    sharded = ShardedSearch.local(_split(ids, emb, [50, 1, 149, 200]), metric="ip")
    tau = 0.05  # logits up to ~100: the log-sum-exp must not overflow
    want = log_partition(queries, emb, temperature=tau)
    got = sharded.log_partition(queries, temperature=tau, block_size=64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=tol, atol=0)
    torch.testing.assert_close(sharded.log_partition(queries, scale=1 / tau, average=True), want - np.log(400))
    # items by id against the one-process function's row positions
    rows = np.random.default_rng(0).integers(0, 400, size=(9, 3))
    got_lp = sharded.log_prob(queries, ids[rows], temperature=tau)
    torch.testing.assert_close(
        got_lp, log_prob(queries, emb, torch.from_numpy(rows), temperature=tau), rtol=tol, atol=tol
    )
    assert sharded.log_prob(queries, ids[rows[:, 0]], temperature=tau).shape == (9,)
    h = sharded.entropy(queries, temperature=tau)
    want_h = entropy(SoftmaxSearch(queries, emb, 1 / tau))
    torch.testing.assert_close(h, want_h, rtol=0, atol=tol * float(want.abs().max()))


def test_one_shard_is_exactly_the_one_process_function() -> None:
    ids, emb, queries = _float_world(np.float64)
    one = ShardedSearch.local([(ids, emb)], metric="ip")
    assert torch.equal(one.log_partition(queries, temperature=0.1), log_partition(queries, emb, temperature=0.1))
    rows = torch.arange(9)
    assert torch.equal(
        one.log_prob(queries, ids[rows.numpy()], temperature=0.1), log_prob(queries, emb, rows, temperature=0.1)
    )
    assert torch.equal(one.entropy(queries, temperature=0.1), entropy(SoftmaxSearch(queries, emb, 10.0)))
    x = torch.randn(5, dtype=torch.float64)
    assert torch.equal(merge_log_partitions([x]), x)


def test_cosine_shards_search_the_unit_vectors() -> None:
    ids, emb, queries = _float_world(np.float64)
    sharded = ShardedSearch.local(_split(ids, emb, [100, 300]), metric="cosine")
    unit = torch.nn.functional.normalize(torch.from_numpy(emb), dim=1)
    q = torch.nn.functional.normalize(torch.from_numpy(queries), dim=1)
    torch.testing.assert_close(
        sharded.log_partition(q, temperature=0.1), log_partition(q, unit, temperature=0.1), rtol=1e-12, atol=0
    )


@pytest.mark.parametrize("margin, max_p", [(None, None), (0.02, None), (None, 0.02), (0.02, 0.05)])
def test_sharded_mining_equals_the_one_process_miner(margin: float | None, max_p: float | None) -> None:
    index, corpus, anchors, pos = mining_world()
    ids = np.arange(300, dtype=np.int64)
    sharded = ShardedSearch.local(_split(ids, corpus.numpy(), [90, 10, 200]), metric="cosine")
    kw = dict(num_negatives=5, candidates=12, exclude_ids=pos, margin=margin, max_probability=max_p, temperature=0.1)
    one = mine_hard_negatives(index, anchors, corpus[pos], batch_size=16, block_size=64, **kw)
    many = mine_hard_negatives(sharded, anchors, corpus[pos], batch_size=16, block_size=64, **kw)
    np.testing.assert_array_equal(many.ids, one.ids)
    np.testing.assert_array_equal(many.scores, one.scores)
    assert (one.ids == -1).any() == (margin is not None or max_p is not None)
    if max_p is not None:
        # the same float32 unit vectors, summed shard by shard: a few float32 ulps of logits ≤ 10
        np.testing.assert_allclose(many.log_prob, one.log_prob, rtol=0, atol=1e-6)


def test_sharded_mining_agrees_with_sentence_transformers() -> None:
    """The transitivity made explicit: sharded miner = one-process miner = sentence-transformers' miner.

    The one-process miner is compared with sentence-transformers' ``mine_hard_negatives`` in
    ``tests/search/test_mining.py`` (on its world 4); here the sharded miner is compared with both there.
    """
    _, corpus, anchors, pos = mining_world(4)
    k, range_max, margin = 4, 10, 0.03
    theirs = sentence_transformers_negatives(corpus, anchors, pos, k=k, range_max=range_max, margin=margin)
    index = EmbeddingIndex(corpus.shape[1], metric="cosine")
    index.add(corpus)
    m = corpus.shape[0]
    sharded = ShardedSearch.local(_split(np.arange(m), corpus.numpy(), [m // 2, m - m // 2]), metric="cosine")
    kw = dict(num_negatives=k, candidates=range_max, exclude_ids=pos, margin=margin)
    one = mine_hard_negatives(index, anchors, corpus[pos], **kw)
    many = mine_hard_negatives(sharded, anchors, corpus[pos], **kw)
    np.testing.assert_array_equal(many.ids, one.ids)
    assert 0 < len(theirs) < anchors.shape[0]
    assert set(theirs) == set(np.flatnonzero(many.complete).tolist())
    for i, negs in theirs.items():
        assert many.ids[i].tolist() == negs, i


def test_bad_shards_and_ids_are_named() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(6, 4))
    with pytest.raises(ValueError, match="id 3 occurs in more than one shard"):
        ShardedSearch.local([(np.arange(5), a), (np.arange(3, 9), b)], metric="ip")
    with pytest.raises(ValueError, match="disagree on the dimension"):
        ShardedSearch.local([(np.arange(5), a), (np.arange(5, 11), rng.normal(size=(6, 3)))], metric="ip")
    sharded = ShardedSearch.local([(np.arange(5), a), (np.arange(5, 11), b)], metric="ip")
    with pytest.raises(ValueError, match="ids: id 99 is held by 0 shards"):
        sharded.log_prob(a[:2], np.array([1, 99]), temperature=1.0)
    with pytest.raises(ValueError, match="k = 12 exceeds the 11 items"):
        sharded.search(a, 12)
    with pytest.raises(ValueError, match="queries has dimension D = 3"):
        sharded.log_partition(rng.normal(size=(2, 3)), temperature=1.0)
