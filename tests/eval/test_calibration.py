"""Tests of norm-based retrieval calibration: AUROC, ECE, isotonic map, softmax search, the report."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from contrastlab.eval.calibration import (
    IsotonicMap,
    auroc,
    calibration_report,
    expected_calibration_error,
    norm_temperature,
    plot_reliability,
    reliability_bins,
    softmax_search_confidence,
    top1_retrieval,
)


def test_auroc_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    scores = np.round(rng.standard_normal(300), 1)  # many ties
    correct = (scores + rng.standard_normal(300) > 0).astype(int)
    assert auroc(scores, correct) == pytest.approx(roc_auc_score(correct, scores), abs=1e-14)
    assert auroc(torch.tensor(-scores), torch.tensor(correct)) == pytest.approx(1 - roc_auc_score(correct, scores))
    assert auroc([1.0, 2.0, 3.0], [0, 1, 1]) == 1.0
    with pytest.raises(ValueError, match="^correct"):
        auroc([1.0, 2.0], [1, 1])


def test_ece_zero_for_perfectly_calibrated_scores() -> None:
    conf, correct = [], []
    for k in range(10):  # bin centres 0.05, 0.15, ..., 0.95; exactly c·20 of 20 correct
        c = 0.05 + 0.1 * k
        conf += [c] * 20
        n_ok = round(c * 20)
        correct += [1] * n_ok + [0] * (20 - n_ok)
    assert expected_calibration_error(np.array(conf), np.array(correct), n_bins=10) == pytest.approx(0, abs=1e-15)


def test_ece_known_value_for_miscalibrated_scores() -> None:
    conf = np.array([0.9] * 10)
    correct = np.array([1] * 6 + [0] * 4)
    assert expected_calibration_error(conf, correct) == pytest.approx(0.3, abs=1e-15)
    # two bins: conf 0.8 with acc 0.5 (n=10) and conf 0.3 with acc 0.4 (n=30): 10/40·0.3 + 30/40·0.1
    conf = np.array([0.8] * 10 + [0.3] * 30)
    correct = np.array([1] * 5 + [0] * 5 + [1] * 12 + [0] * 18)
    assert expected_calibration_error(conf, correct, n_bins=10) == pytest.approx(0.15, abs=1e-15)
    b = reliability_bins(conf, correct, n_bins=10)
    assert b["count"].sum() == 40 and b["count"][7] == 10 and b["count"][2] == 30
    assert b["accuracy"][7] == 0.5 and np.isnan(b["accuracy"][0])
    assert expected_calibration_error([0.0, 1.0], [0, 1], n_bins=3) == 0.0  # edges land in the end bins


def test_isotonic_map_is_monotone_and_calibrated_in_sample() -> None:
    rng = np.random.default_rng(1)
    s = rng.standard_normal(500)
    y = (rng.random(500) < 1 / (1 + np.exp(-2 * s))).astype(int)
    iso = IsotonicMap(s, y)
    p = iso(s)
    order = np.argsort(s)
    assert np.all(np.diff(p[order]) >= 0) and p.min() >= 0 and p.max() <= 1
    assert expected_calibration_error(p, y, n_bins=15) < 1e-12  # each level set's mean equals its value
    assert iso(np.array([-100.0, 100.0])).tolist() == [p.min(), p.max()]  # clipped outside the range


# A float32 cosine of D-vectors is off by at most (D + 2) u (Higham 2002, eq. 3.5; u = 2⁻²⁴); two
# implementations differ by twice that, a logit s/τ by that over τ, and a softmax probability's relative
# error is at most twice its logits' largest error.
def _softmax_rtol(dim: int, tau: float) -> float:
    return 2 * (2 * (dim + 2) * 2.0**-24 / tau)


def test_top1_retrieval_and_softmax_search_against_naive_loops() -> None:
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(6, 3, generator=g), torch.randn(9, 3, generator=g)
    ql, cl = torch.randint(0, 3, (6,), generator=g), torch.randint(0, 3, (9,), generator=g)
    got = top1_retrieval(q * 5, ql, c, cl)  # the query's scale does not change retrieval
    for i in range(6):
        cos = [float(torch.nn.functional.cosine_similarity(q[i], c[j], dim=0)) for j in range(9)]
        assert bool(got[i]) == (int(cl[int(np.argmax(cos))]) == int(ql[i]))
        e = np.exp(np.array(cos) / 0.2)
        msp = softmax_search_confidence(q, c, temperature=0.2)[i]
        assert float(msp) == pytest.approx(e.max() / e.sum(), rel=_softmax_rtol(3, 0.2))
    mass = softmax_search_confidence(q, c, temperature=0.2, corpus_labels=cl)
    for i in range(6):
        cos = np.array([float(torch.nn.functional.cosine_similarity(q[i], c[j], dim=0)) for j in range(9)])
        e = np.exp(cos / 0.2)
        same = (cl == cl[int(np.argmax(cos))]).numpy()
        assert float(mass[i]) == pytest.approx(e[same].sum() / e.sum(), rel=_softmax_rtol(3, 0.2))
    tau = norm_temperature(torch.tensor([1.0, 2.0, 4.0]), temperature=0.1, reference_norm=2.0)
    torch.testing.assert_close(tau, torch.tensor([0.2, 0.1, 0.05], dtype=torch.float64))
    per_query = softmax_search_confidence(q[:3], c, temperature=tau)
    single = float(softmax_search_confidence(q[2:3], c, temperature=0.05)[0])  # another matmul shape
    assert float(per_query[2]) == pytest.approx(single, rel=_softmax_rtol(3, 0.05))
    with pytest.raises(ValueError, match="^corpus"):
        top1_retrieval(q, ql, c[:, :2], cl)
    with pytest.raises(ValueError, match="^query_labels"):
        top1_retrieval(q, ql[:2], c, cl)


def test_calibration_report_finds_an_informative_norm(tmp_path) -> None:
    """Queries whose norm is large are the clean ones (retrieved correctly): AUROC(norm) must be high."""
    g = torch.Generator().manual_seed(0)
    centres = torch.nn.functional.normalize(torch.randn(5, 8, generator=g), dim=1)
    labels = torch.randint(0, 5, (400,), generator=g)
    noise_level = torch.rand(400, generator=g) * 2.0
    direction = centres[labels] + noise_level[:, None] * torch.randn(400, 8, generator=g)
    norms = 3.0 - noise_level + 0.1 * torch.rand(400, generator=g)  # noisy queries have small norms
    query = torch.nn.functional.normalize(direction, dim=1) * norms[:, None]
    rep = calibration_report(query, labels, centres, torch.arange(5), temperature=0.1, rng=np.random.default_rng(0))
    by = {s.name: s for s in rep.scores}
    assert set(by) == {"norm", "msp", "msp_norm_temperature"}
    assert 0.2 < rep.accuracy < 0.95 and rep.n_calibration + rep.n_test == 400
    assert by["norm"].auroc > 0.7 and by["norm"].ece_raw is None
    assert 0 <= by["norm"].ece_isotonic < 0.12
    assert by["msp"].ece_raw is not None
    table = rep.table("t")
    assert table["columns"][1] == "AUROC" and len(table["rows"]) == 3
    plot_reliability(rep, tmp_path / "rel.png", title="t")
    assert (tmp_path / "rel.png").stat().st_size > 1000
