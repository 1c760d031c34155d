"""Frozen-feature evaluation against naive references: loops for kNN and R@k, scipy for the t-interval."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from contrastlab.data import ImageDataset
from contrastlab.eval import probe


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def separable(n: int, d: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k well-separated Gaussian blobs in d dimensions with an arbitrary scale and offset per feature."""
    g = gen(seed)
    centres = torch.randn(k, d, generator=gen(99)) * 10
    y = torch.arange(n) % k
    x = centres[y] + torch.randn(n, d, generator=g)
    return x * torch.linspace(0.01, 100, d) + 7.0, y


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_linear_probe_separates_separable_data(optimizer: str) -> None:
    x_tr, y_tr = separable(200, 6, 4, 0)
    x_te, y_te = separable(100, 6, 4, 1)
    res = probe.linear_probe(
        x_tr, y_tr, x_te, y_te, optimizer=optimizer, epochs=100, lr=None if optimizer == "lbfgs" else 0.05
    )
    assert res.accuracy == 1.0 and res.train_accuracy == 1.0
    assert res.weight.shape == (4, 6) and res.predictions.shape == (100,)
    # standardisation used the training statistics
    assert torch.allclose(res.mean, x_tr.mean(0)) and torch.allclose(res.std, x_tr.std(0, unbiased=False))


def test_linear_probe_is_deterministic_and_seeded() -> None:
    x, y = torch.randn(120, 5, generator=gen(0)), torch.randint(0, 3, (120,), generator=gen(1))
    a = probe.linear_probe(x, y, x, y, optimizer="adam", epochs=3, seed=4)
    b = probe.linear_probe(x, y, x, y, optimizer="adam", epochs=3, seed=4)
    c = probe.linear_probe(x, y, x, y, optimizer="adam", epochs=3, seed=5)
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)
    l1, l2 = probe.linear_probe(x, y, x, y), probe.linear_probe(x, y, x, y)
    assert torch.equal(l1.weight, l2.weight)


def test_linear_probe_reaches_the_regularised_optimum() -> None:
    # L-BFGS must land at the minimum of the strictly convex objective: gradient ~ 0
    x, y = torch.randn(150, 4, generator=gen(2)), torch.randint(0, 3, (150,), generator=gen(3))
    res = probe.linear_probe(x, y, x, y, weight_decay=0.1, epochs=200)
    w = res.weight.clone().requires_grad_(True)
    b = res.bias.clone().requires_grad_(True)
    z = (x - res.mean) / res.std
    loss = torch.nn.functional.cross_entropy(z @ w.T + b, y) + 0.05 * w.pow(2).sum()
    loss.backward()
    assert float(w.grad.abs().max()) < 1e-4 and float(b.grad.abs().max()) < 1e-4
    assert math.isclose(float(loss.detach()), res.final_loss, rel_tol=1e-5)


def naive_knn(train: torch.Tensor, train_y: torch.Tensor, queries: torch.Tensor, k: int, tau: float,
              n_cls: int, exclude_self: bool = False) -> list[int]:  # fmt: skip
    preds = []
    for i in range(queries.shape[0]):
        sims = []
        for j in range(train.shape[0]):
            if exclude_self and i == j:
                continue
            cos = float(queries[i] @ train[j]) / (float(queries[i].norm()) * float(train[j].norm()))
            sims.append((cos, j))
        sims.sort(key=lambda t: -t[0])
        votes = [0.0] * n_cls
        for cos, j in sims[:k]:
            votes[int(train_y[j])] += math.exp(cos / tau)
        preds.append(max(range(n_cls), key=lambda c: (votes[c], -c)))
    return preds


@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_knn_predict_matches_a_naive_loop(tau: float) -> None:
    train, train_y = torch.randn(60, 5, generator=gen(0)), torch.randint(0, 4, (60,), generator=gen(1))
    queries = torch.randn(25, 5, generator=gen(2))
    ks = (1, 2, 5, 10, 20, 50)
    preds = probe.knn_predict(train, train_y, queries, k=ks, temperature=tau, chunk_size=7)
    for k in ks:
        assert preds[k].tolist() == naive_knn(train, train_y, queries, k, tau, 4), k
    loo = probe.knn_predict(train, train_y, train, k=(1, 5), temperature=tau, exclude_self=True, chunk_size=16)
    for k in (1, 5):
        assert loo[k].tolist() == naive_knn(train, train_y, train, k, tau, 4, exclude_self=True)
    acc = probe.knn_accuracy(train, train_y, queries, torch.zeros(25, dtype=torch.long), k=ks, temperature=tau)
    assert acc[5] == pytest.approx(sum(p == 0 for p in naive_knn(train, train_y, queries, 5, tau, 4)) / 25)


def naive_recall(feats: torch.Tensor, y: torch.Tensor, k: int, gallery: torch.Tensor | None = None,
                 gallery_y: torch.Tensor | None = None) -> float:  # fmt: skip
    hits = 0
    for i in range(feats.shape[0]):
        cands = []
        pool = feats if gallery is None else gallery
        pool_y = y if gallery_y is None else gallery_y
        for j in range(pool.shape[0]):
            if gallery is None and i == j:
                continue  # the query itself is excluded
            cos = float(feats[i] @ pool[j]) / (float(feats[i].norm()) * float(pool[j].norm()))
            cands.append((cos, int(pool_y[j])))
        cands.sort(key=lambda t: -t[0])
        hits += any(lab == int(y[i]) for _, lab in cands[:k])
    return hits / feats.shape[0]


def test_knn_recall_matches_a_naive_loop() -> None:
    feats, y = torch.randn(56, 6, generator=gen(5)), torch.randint(0, 7, (56,), generator=gen(6))
    rec = probe.knn_recall(feats, y, k=probe.KNN_KS, chunk_size=9)
    for k in probe.KNN_KS:
        assert rec[k] == pytest.approx(naive_recall(feats, y, k)), k
    gal, gal_y = torch.randn(51, 6, generator=gen(7)), torch.randint(0, 7, (51,), generator=gen(8))
    rec_g = probe.knn_recall(feats, y, k=(1, 3, 50), gallery_features=gal, gallery_labels=gal_y)
    for k in (1, 3, 50):
        assert rec_g[k] == pytest.approx(naive_recall(feats, y, k, gal, gal_y))
    values = [rec[k] for k in probe.KNN_KS]
    assert values == sorted(values)  # R@k is non-decreasing in k


def test_knn_self_match_is_excluded() -> None:
    # every item is alone in its class: with the query excluded, R@1 must be 0
    feats = torch.randn(10, 3, generator=gen(0))
    assert probe.knn_recall(feats, torch.arange(10), k=1) == {1: 0.0}
    with pytest.raises(ValueError, match="^k"):
        probe.knn_recall(feats, torch.arange(10), k=10)  # only 9 candidates once the query is excluded


@pytest.mark.parametrize("values", [[0.5, 0.7], [1.0, 2.0, 4.0, 3.5, 2.2], [0.53, 0.5, 0.52, 0.49]])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_mean_ci_matches_scipy(values: list[float], confidence: float) -> None:
    ci = probe.mean_ci(values, confidence)
    low, high = stats.t.interval(confidence, len(values) - 1, loc=sum(values) / len(values), scale=stats.sem(values))
    assert ci.low == pytest.approx(low, rel=1e-10) and ci.high == pytest.approx(high, rel=1e-10)
    assert ci.n == len(values) and ci.std == pytest.approx(stats.tstd(values))
    single = probe.mean_ci([0.3])
    assert single.mean == 0.3 and math.isnan(single.half_width)
    with pytest.raises(ValueError, match="^values"):
        probe.mean_ci([])


def test_summarize_seeds() -> None:
    runs = [{"acc": 0.5, "R@1": 0.3}, {"acc": 0.7, "R@1": 0.4}, {"acc": 0.6, "R@1": 0.35}]
    out = probe.summarize_seeds(runs)
    assert out["acc"].mean == pytest.approx(0.6) and out["R@1"].n == 3
    assert out["acc"].format(100) == f"60.00 ± {out['acc'].half_width * 100:.2f}"
    with pytest.raises(ValueError, match="^runs"):
        probe.summarize_seeds([{"acc": 0.5}, {"R@1": 0.1}])


def test_extract_features_and_baselines() -> None:
    g = gen(0)
    images = torch.randint(0, 256, (30, 1, 8, 8), generator=g, dtype=torch.uint8)
    ds = ImageDataset(images, torch.arange(30) % 3, ("a", "b", "c"), "toy")
    enc = probe.random_encoder("cnn", 1, 8, 16, width=4, seed=3)
    enc.train()
    feats = probe.extract_features(enc, ds, batch_size=7)
    assert feats.shape == (30, 16) and enc.training  # mode restored
    enc.eval()
    with torch.no_grad():
        assert torch.allclose(feats, enc(images.float() / 255), atol=1e-5)
    again = probe.random_encoder("cnn", 1, 8, 16, width=4, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(enc.parameters(), again.parameters(), strict=True))
    state = torch.get_rng_state()
    probe.random_encoder("cnn", 1, 8, 16, width=4, seed=4)
    assert torch.equal(state, torch.get_rng_state())  # the global RNG is untouched
    raw = probe.raw_pixel_features(ds)
    assert raw.shape == (30, 64) and torch.allclose(raw, images.flatten(1).float() / 255)
    metrics = probe.evaluate_encoder(enc, ds, ds, ks=(1, 5))
    assert set(metrics) == {"linear_acc", "knn_acc@1", "knn_acc@5", "R@1", "R@5"}
    assert all(0.0 <= v <= 1.0 for v in metrics.values())


def test_evaluate_features_on_clustered_data() -> None:
    x_tr, y_tr = separable(200, 6, 4, 0)
    x_te, y_te = separable(100, 6, 4, 1)
    m = probe.evaluate_features(x_tr - 7.0, y_tr, x_te - 7.0, y_te, ks=(1, 10))
    assert m["linear_acc"] == 1.0 and m["knn_acc@10"] > 0.9 and m["R@1"] > 0.9


def test_bad_arguments_are_named() -> None:
    x, y = torch.randn(10, 3), torch.arange(10) % 2
    with pytest.raises(ValueError, match="^test_features"):
        probe.linear_probe(x, y, torch.randn(5, 4), y[:5])
    with pytest.raises(ValueError, match="^optimizer"):
        probe.linear_probe(x, y, x, y, optimizer="sgd")
    with pytest.raises(ValueError, match="^temperature"):
        probe.knn_predict(x, y, x, temperature=0.0)
    with pytest.raises(ValueError, match="^k"):
        probe.knn_predict(x, y, x, k=11)
    with pytest.raises(ValueError, match="^train_labels"):
        probe.knn_predict(x, y[:5], x)
