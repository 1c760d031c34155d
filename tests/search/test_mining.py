"""Hard-negative mining: a brute-force reference, sentence-transformers' miner, bounded memory, bad input."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from contrastlab.losses import info_nce
from contrastlab.search import EmbeddingIndex
from contrastlab.search.mining import MinedNegatives, mine_hard_negatives, per_anchor_negatives

N, M, D = 40, 300, 8


def _world(seed: int = 0):
    """Corpus items around 6 centres; anchor i's positive is corpus item pos[i], a near copy of it."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(6, D, generator=g)
    corpus = torch.nn.functional.normalize(centres[torch.arange(M) % 6] + 0.6 * torch.randn(M, D, generator=g), dim=1)
    pos = torch.randperm(M, generator=g)[:N]
    anchors = torch.nn.functional.normalize(corpus[pos] + 0.15 * torch.randn(N, D, generator=g), dim=1)
    index = EmbeddingIndex(D, metric="cosine", kind="flat")
    index.add(corpus)
    return index, corpus, anchors, pos


def _reference(corpus, anchors, pos, k, c, margin, max_p, tau):
    """Per anchor: all M similarities (float64), the top c + 1, its positive dropped, the filters, the first k."""
    sims = (anchors.double() @ corpus.double().T).numpy()  # (N, M)
    log_z = torch.logsumexp(torch.from_numpy(sims) / tau, dim=1).numpy()
    out = []
    for i in range(anchors.shape[0]):
        # as sentence-transformers: the c + 1 nearest (the positive included), the positive dropped,
        # the filters, at most c survivors
        order = [j for j in np.argsort(-sims[i], kind="stable")[: c + 1] if j != int(pos[i])]
        s_pos = sims[i, int(pos[i])]
        keep = [
            j
            for j in order
            if (margin is None or sims[i, j] <= s_pos - margin)
            and (max_p is None or sims[i, j] / tau - log_z[i] <= np.log(max_p))
        ][:c]
        out.append(keep[:k] + [-1] * (k - len(keep[:k])))
    return np.array(out)


@pytest.mark.parametrize("margin, max_p", [(None, None), (0.0, None), (0.05, None), (None, 0.02), (0.02, 0.05)])
def test_matches_brute_force(margin, max_p):
    index, corpus, anchors, pos = _world()
    k, c, tau = 5, 12, 0.1
    mined = mine_hard_negatives(
        index, anchors, corpus[pos], num_negatives=k, candidates=c, exclude_ids=pos, margin=margin,
        max_probability=max_p, temperature=tau, batch_size=7, block_size=64,
    )  # fmt: skip
    want = _reference(corpus, anchors, pos, k, c, margin, max_p, tau)
    # float32 search vs float64 reference: the data has no ties or near-threshold values closer than 1e-4
    np.testing.assert_array_equal(mined.ids, want)
    assert (mined.ids == -1).any() == (margin is not None or max_p is not None)  # the filters did remove some
    found = mined.ids >= 0
    sims = (anchors.double() @ corpus.double().T).numpy()
    np.testing.assert_allclose(mined.scores[found], sims[np.nonzero(found)[0], mined.ids[found]], atol=1e-5)
    assert np.isnan(mined.scores[~found]).all()
    if max_p is not None:
        log_z = torch.logsumexp(torch.from_numpy(sims) / tau, dim=1).numpy()
        want_lp = sims[np.nonzero(found)[0], mined.ids[found]] / tau - log_z[np.nonzero(found)[0]]
        np.testing.assert_allclose(mined.log_prob[found], want_lp, atol=1e-4)  # float32 scores / τ = 0.1


def test_batching_does_not_change_the_result():
    index, corpus, anchors, pos = _world(1)
    kw = dict(num_negatives=4, exclude_ids=pos, margin=0.01, max_probability=0.1, temperature=0.1)
    one = mine_hard_negatives(index, anchors, corpus[pos], batch_size=N, **kw)
    many = mine_hard_negatives(index, anchors, corpus[pos], batch_size=3, block_size=17, **kw)
    np.testing.assert_array_equal(one.ids, many.ids)
    # the log-partition's float32 block logits (|s/τ| ≤ 10) summed in other groupings: a few fp32 ulps
    np.testing.assert_allclose(one.log_prob, many.log_prob, rtol=0, atol=1e-5)


def test_negatives_feed_info_nce_and_survive_a_round_trip(tmp_path):
    index, corpus, anchors, pos = _world(2)
    mined = mine_hard_negatives(index, anchors, corpus[pos], num_negatives=3, exclude_ids=pos)
    rows = np.flatnonzero(mined.complete)
    negs = per_anchor_negatives(mined, rows, corpus)  # (n, K, D)
    assert negs.shape == (rows.size, 3, D)
    assert torch.equal(negs[0, 1], corpus[mined.ids[rows[0], 1]])
    assert info_nce(anchors[rows], corpus[pos][rows], negs).ndim == 0
    mined.save(tmp_path / "neg.npz")
    back = MinedNegatives.load(tmp_path / "neg.npz")
    np.testing.assert_array_equal(back.ids, mined.ids)
    assert back.log_prob is None
    np.savez(tmp_path / "bad.npz", ids=np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="^path .*missing"):
        MinedNegatives.load(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="^rows: anchor"):
        per_anchor_negatives(mined._replace(ids=np.full_like(mined.ids, -1)), rows[:1], corpus)


def test_memory_is_bounded_by_the_query_batch():
    """2,000 anchors × 20,000 items: numpy never holds anything near N × M (160 MB as float32)."""
    g = torch.Generator().manual_seed(3)
    corpus = torch.randn(20_000, 16, generator=g)
    anchors = torch.randn(2_000, 16, generator=g)
    index = EmbeddingIndex(16, metric="cosine")
    index.add(corpus)
    tracemalloc.start()
    try:
        mine_hard_negatives(index, anchors, anchors, num_negatives=8, margin=None, batch_size=256)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # inputs copied as float32 (2 × 128 kB), results (2,000 × 8 × 12 B) and one batch's 256 × 32 candidates
    assert peak < 4_000_000, peak


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(anchors=torch.randn(4, 5)), ValueError, "^anchors has dimension D = 5"),
        (dict(positives=torch.randn(3, D)), ValueError, "^positives must have the N = 4"),
        (dict(num_negatives=0), ValueError, "^num_negatives"),
        (dict(candidates=2), ValueError, "^candidates"),
        (dict(margin=-0.1), ValueError, "^margin"),
        (dict(max_probability=1.5), ValueError, "^max_probability"),
        (dict(temperature=0.0), ValueError, "^temperature"),
        (dict(exclude_ids=np.zeros(3, dtype=np.int64)), ValueError, "^exclude_ids"),
        (dict(index="flat"), TypeError, "^index"),
    ],
)
def test_bad_input_is_named_before_any_search(kw, exc, match):
    index, corpus, anchors, pos = _world()
    args = dict(index=index, anchors=anchors[:4], positives=corpus[pos[:4]], num_negatives=3) | kw
    with pytest.raises(exc, match=match):
        mine_hard_negatives(args.pop("index"), args.pop("anchors"), args.pop("positives"), **args)


def sentence_transformers_negatives(corpus, anchors, pos, *, k, range_max, margin):
    """sentence-transformers' ``mine_hard_negatives`` on these embeddings: anchor → its k negative corpus rows.

    A lookup-table model maps text "c{j}" to ``corpus[j]`` and "a{i}" to ``anchors[i]``. Its corpus is the
    de-duplicated positives + corpus texts, the anchor's positive is masked, an item is dropped when
    ``score + absolute_margin > positive score``, and the top ``num_negatives`` of the first ``range_max``
    candidates are kept ("top" sampling); "n-tuple" output drops anchors with fewer.
    """
    pytest.importorskip("datasets")
    st = pytest.importorskip("sentence_transformers")
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives as st_mine

    n, m, d = anchors.shape[0], corpus.shape[0], corpus.shape[1]
    table = torch.cat([corpus, anchors])  # text "c{j}" → corpus[j], "a{i}" → anchors[i]
    names = {f"c{j}": j for j in range(m)} | {f"a{i}": m + i for i in range(n)}

    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def tokenize(self, texts, **kwargs):
            return {"row": torch.tensor([names[t] for t in texts])}

        def forward(self, features):
            features["sentence_embedding"] = table[features["row"]] + 0 * self.dummy
            return features

        def get_sentence_embedding_dimension(self):
            return d

    model = st.SentenceTransformer(modules=[Lookup()], device="cpu")
    data = Dataset.from_dict({"anchor": [f"a{i}" for i in range(n)], "positive": [f"c{int(j)}" for j in pos]})
    out = st_mine(
        data, model, corpus=[f"c{j}" for j in range(m)], num_negatives=k, range_max=range_max,
        absolute_margin=margin, sampling_strategy="top", output_format="n-tuple", verbose=False,
    )  # fmt: skip
    return {int(r["anchor"][1:]): [int(r[f"negative_{j + 1}"][1:]) for j in range(k)] for r in out}


def test_agrees_with_sentence_transformers():
    """Ours with ``candidates = range_max`` and ``margin = absolute_margin`` gives sentence-transformers' negatives."""
    index, corpus, anchors, pos = _world(4)
    k, range_max, margin = 4, 10, 0.03
    theirs = sentence_transformers_negatives(corpus, anchors, pos, k=k, range_max=range_max, margin=margin)
    ours = mine_hard_negatives(
        index, anchors, corpus[pos], num_negatives=k, candidates=range_max, exclude_ids=pos, margin=margin
    )
    assert 0 < len(theirs) < N  # the margin left some anchors short: both drop the same ones
    assert set(theirs) == set(np.flatnonzero(ours.complete).tolist())
    for i, negs in theirs.items():
        assert ours.ids[i].tolist() == negs, i


def test_negatives_from_candidates_serves_a_sharded_search():
    """Two shards searched apart, their results merged by score: the same negatives as the whole index."""
    from contrastlab.search.mining import negatives_from_candidates

    index, corpus, anchors, pos = _world(5)
    kw = dict(margin=0.02, relative_margin=0.01, max_score=0.95, min_score=-0.2, range_min=1)
    whole = mine_hard_negatives(index, anchors, corpus[pos], num_negatives=4, candidates=14, exclude_ids=pos, **kw)
    half = M // 2
    parts = []
    for lo, hi in ((0, half), (half, M)):
        shard = EmbeddingIndex(D, metric="cosine", kind="flat")
        shard.add(corpus[lo:hi])
        res = shard.search(anchors, 15)  # candidates + P = 15 nearest of each shard
        parts.append((res.ids + lo, res.scores))
    ids = np.concatenate([p[0] for p in parts], axis=1)
    scores = np.concatenate([p[1] for p in parts], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")
    ids, scores = np.take_along_axis(ids, order, 1)[:, :15], np.take_along_axis(scores, order, 1)[:, :15]
    unit = torch.nn.functional.normalize
    pos_scores = (unit(anchors, dim=1) * unit(corpus[pos], dim=1)).sum(1).numpy()
    got_ids, got_scores, _ = negatives_from_candidates(
        ids, scores, pos_scores, num_negatives=4, candidates=14, exclude=pos.numpy()[:, None], **kw
    )
    np.testing.assert_array_equal(got_ids, whole.ids)
    assert (whole.ids == -1).any() and (whole.ids >= 0).any()  # the filters bit, and some anchors are whole
    np.testing.assert_allclose(got_scores, whole.scores, rtol=0, atol=1e-6)
