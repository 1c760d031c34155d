import math

import numpy as np
import pytest
import scipy.stats
import torch

from contrastlab.search import EmbeddingIndex, softmax


def _data(q=6, n=1003, d=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(q, d, generator=g, dtype=dtype), torch.randn(n, d, generator=g, dtype=dtype)


@pytest.mark.parametrize("tau", [1.0, 0.1, 0.01])
@pytest.mark.parametrize("block_size", [5, 97, 1000, None])  # none divides N = 1003
def test_log_partition_matches_torch_logsumexp(tau, block_size):
    q, c = _data()
    ref32 = torch.logsumexp(q @ c.T / tau, dim=1)  # float32 reference, as a user would compute it
    ref64 = torch.logsumexp(q.double() @ c.double().T / tau, dim=1)
    got = softmax.log_partition(q, c, temperature=tau, block_size=block_size)
    assert got.dtype == torch.float64 and got.shape == (6,)
    assert torch.isfinite(got).all()  # tau = 0.01: logits reach ~1500, exp would overflow float32/64
    torch.testing.assert_close(got, ref32.double(), rtol=1e-5, atol=0)
    torch.testing.assert_close(got, ref64, rtol=1e-6, atol=0)


def test_log_partition_scale_equals_inverse_temperature_and_float64_is_exact():
    q, c = _data(dtype=torch.float64)
    ref = torch.logsumexp(q @ c.T * 4.0, dim=1)
    torch.testing.assert_close(softmax.log_partition(q, c, scale=4.0, block_size=10), ref, rtol=1e-13, atol=0)
    torch.testing.assert_close(softmax.log_partition(q, c, temperature=0.25, block_size=10), ref, rtol=1e-13, atol=0)


def test_corpus_forms_agree_numpy_blocks_and_npy_file(tmp_path):
    q, c = _data(n=500)
    ref = softmax.log_partition(q, c, temperature=0.1, block_size=64)
    cn = c.numpy()
    torch.testing.assert_close(softmax.log_partition(q.numpy(), cn, temperature=0.1, block_size=64), ref)
    uneven = [cn[:3], torch.from_numpy(cn[3:300]), cn[300:]]
    torch.testing.assert_close(softmax.log_partition(q, uneven, temperature=0.1, block_size=64), ref)
    np.save(tmp_path / "c.npy", cn)
    blocks = softmax.NpyBlocks(tmp_path / "c.npy", block_size=77)
    assert len(blocks) == 500 and sum(b.shape[0] for b in blocks) == 500
    torch.testing.assert_close(softmax.log_partition(q, blocks, temperature=0.1), ref, rtol=1e-6, atol=0)


def test_log_prob_sums_to_one_and_matches_softmax():
    q, c = _data(n=257)
    items = torch.arange(257).expand(6, -1)
    lp = softmax.log_prob(q, c, items, temperature=0.2, block_size=50)
    torch.testing.assert_close(lp.exp().sum(1), torch.ones(6, dtype=torch.float64), rtol=1e-6, atol=0)
    ref = torch.log_softmax(q.double() @ c.double().T / 0.2, dim=1)
    torch.testing.assert_close(lp, ref, rtol=1e-5, atol=1e-5)
    one = softmax.log_prob(q, c, torch.tensor([0, 5, 256, 3, 100, 7]), temperature=0.2, block_size=50)
    torch.testing.assert_close(one, ref[torch.arange(6), torch.tensor([0, 5, 256, 3, 100, 7])], rtol=1e-5, atol=1e-5)


def test_sampling_frequencies_match_probabilities():
    q, c = _data(q=2, n=12, d=4, seed=3)
    tau, s = 0.7, 20000
    draws = softmax.sample(q, c, s, generator=torch.Generator().manual_seed(1), temperature=tau, block_size=5)
    assert draws.shape == (2, s) and draws.dtype == torch.int64
    p = torch.softmax(q.double() @ c.double().T / tau, dim=1).numpy()
    for i in range(2):
        counts = np.bincount(draws[i].numpy(), minlength=12)
        _, pval = scipy.stats.chisquare(counts, p[i] * s)
        assert pval > 1e-3, (counts, p[i] * s)
    again = softmax.sample(q, c, s, generator=torch.Generator().manual_seed(1), temperature=tau, block_size=5)
    assert torch.equal(draws, again)


def test_cross_entropy_of_a_search_with_itself_is_its_entropy():
    q, c = _data(n=300)
    p = softmax.SoftmaxSearch(q, c, 3.0)
    logp = torch.log_softmax(q.double() @ c.double().T * 3.0, dim=1)
    h_ref = -(logp.exp() * logp).sum(1)
    torch.testing.assert_close(softmax.entropy(p, block_size=41), h_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        softmax.cross_entropy(p, (q.clone(), c.clone(), 3.0), block_size=41), h_ref, rtol=1e-5, atol=1e-6
    )
    assert (softmax.entropy(p) >= 0).all() and (softmax.entropy(p) <= math.log(300) + 1e-9).all()


def test_cross_entropy_learned_vs_idealised_matches_dense_formula_and_gibbs():
    g = torch.Generator().manual_seed(5)
    zq, zc = torch.randn(4, 3, generator=g), torch.randn(200, 3, generator=g)
    fq, fc = torch.randn(4, 8, generator=g), torch.randn(200, 8, generator=g)
    kappa, tau = 2.0, 0.5
    ideal, learned = (zq, zc, kappa), (fq, fc, 1 / tau)
    ce = softmax.cross_entropy(ideal, learned, block_size=33)
    logp = torch.log_softmax(kappa * zq.double() @ zc.double().T, 1)
    logq = torch.log_softmax(fq.double() @ fc.double().T / tau, 1)
    ref = -(logp.exp() * logq).sum(1)
    torch.testing.assert_close(ce, ref, rtol=1e-5, atol=1e-6)
    assert (ce >= softmax.entropy(ideal) - 1e-9).all()  # Gibbs: CE[P||Q] >= H(P)
    dens = softmax.cross_entropy(ideal, learned, block_size=33, density=True)
    torch.testing.assert_close(dens, ce - math.log(200))

    # the same searches as logits functions (start, stop) -> (Q, stop - start)
    def ideal_fn(a, b):
        return kappa * zq @ zc[a:b].T

    def learned_fn(a, b):
        return fq @ fc[a:b].T / tau

    torch.testing.assert_close(
        softmax.cross_entropy(ideal_fn, learned_fn, num_items=200, block_size=64), ref, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(softmax.cross_entropy(ideal_fn, learned, num_items=200), ref, rtol=1e-5, atol=1e-6)


def test_topk_bound_holds_and_is_exact_at_k_equals_n():
    q, c = _data(q=8, n=400)
    index = EmbeddingIndex(16, metric="ip")
    index.add(c)
    for tau in (1.0, 0.1, 0.02):
        exact = softmax.log_partition(q, c, temperature=tau)
        for k in (1, 10, 100):
            b = softmax.topk_log_partition(index, q, k, temperature=tau)
            # faiss and torch round the float32 scores differently, each by at most (D + 2) u |q| |c|
            # (Higham 2002, eq. 3.5); a log-sum-exp moves by at most its largest logit's error
            slack = 2 * (16 + 2) * 2.0**-24 * q.double().norm(dim=1) * c.double().norm(dim=1).max() / tau
            assert (b.lower <= exact + slack).all() and (exact <= b.upper + slack).all()
            assert (b.max_error >= 0).all()
        full = softmax.topk_log_partition(index, q, 400, temperature=tau)
        torch.testing.assert_close(full.lower, exact, rtol=1e-5, atol=0)
        torch.testing.assert_close(full.upper, exact, rtol=1e-5, atol=0)
    # a peaked search (small tau) is pinned down by its top 10 far better than a flat one
    sharp = softmax.topk_log_partition(index, q, 10, temperature=0.02).max_error.mean()
    flat = softmax.topk_log_partition(index, q, 10, temperature=1.0).max_error.mean()
    assert sharp < flat


def test_errors_name_the_argument():
    q, c = _data(n=20)
    with pytest.raises(ValueError, match="temperature and scale"):
        softmax.log_partition(q, c)
    with pytest.raises(ValueError, match="temperature and scale"):
        softmax.log_partition(q, c, temperature=0.1, scale=10.0)
    with pytest.raises(ValueError, match="^temperature"):
        softmax.log_partition(q, c, temperature=-1.0)
    with pytest.raises(ValueError, match="search.corpus has dimension"):
        softmax.log_partition(q, torch.randn(20, 3), temperature=0.1)
    with pytest.raises(ValueError, match="search.queries contains NaN"):
        softmax.log_partition(torch.full((2, 16), float("nan")), c, temperature=0.1)
    with pytest.raises(ValueError, match="^items must lie in"):
        softmax.log_prob(q, c, torch.full((6,), 20), temperature=0.1)
    with pytest.raises(ValueError, match="^num_items"):
        softmax.cross_entropy(lambda a, b: torch.zeros(2, b - a), (q, c, 1.0))
    with pytest.raises(ValueError, match="^block_size"):
        softmax.log_partition(q, c, temperature=0.1, block_size=0)
    with pytest.raises(TypeError, match="^generator"):
        softmax.sample(q, c, 3, generator=None, temperature=0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="q has more corpus items"):
        softmax.cross_entropy((q, c[:10], 1.0), (q, c, 1.0), block_size=5)
    flat = EmbeddingIndex(16, kind="hnsw")
    flat.add(c)
    with pytest.raises(ValueError, match="^index must be exact"):
        softmax.topk_log_partition(flat, q, 3, temperature=0.1)


@pytest.mark.parametrize("block_size", [None, 7, 64])
def test_log_partition_both_conventions_against_torch_logsumexp(block_size):
    """The sum (default) is logsumexp over all N rows; ``average=True`` is that minus log N, N counted over blocks."""
    g = torch.Generator().manual_seed(4)
    q, c = torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randn(130, 6, generator=g, dtype=torch.float64)
    lse = torch.logsumexp(q @ c.T / 0.3, dim=1)
    got_sum = softmax.log_partition(q, c, temperature=0.3, block_size=block_size)
    torch.testing.assert_close(got_sum, lse, rtol=1e-13, atol=1e-13)
    for corpus in (c, [c[:50], c[50:51], c[51:]]):  # a tensor, and uneven blocks: N = 130 either way
        got_mean = softmax.log_partition(q, corpus, temperature=0.3, block_size=block_size, average=True)
        torch.testing.assert_close(got_mean, lse - math.log(130), rtol=1e-13, atol=1e-13)
    with pytest.raises(TypeError, match="^average"):
        softmax.log_partition(q, c, temperature=0.3, average=1)
