"""evaluate_retrieval: lone queries counted, bad input refused with the argument named."""

import numpy as np
import pytest

from contrastlab.search import EmbeddingIndex, evaluate_retrieval


def test_evaluate_retrieval_counts_lone_queries_and_validates():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 12)).astype(np.float32)
    lab = rng.integers(0, 7, size=60)
    index = EmbeddingIndex(12)
    index.add(x, labels=lab)
    ql = lab[:10].copy()
    ql[0] = 99  # no item of label 99 in the corpus
    out = evaluate_retrieval(index, x[:10], ql, ks=(1, 5))
    assert out["num_lone_queries"] == 1 and out["num_queries"] == 10
    assert set(out) >= {
        "recall@1",
        "recall@5",
        "recall_fraction@5",
        "ndcg@5",
        "mrr@5",
        "map@r",
        "r_precision",
    }
    unlabelled = EmbeddingIndex(12)
    unlabelled.add(x)
    with pytest.raises(ValueError, match="^index has no labels"):
        evaluate_retrieval(unlabelled, x[:10], ql)
    with pytest.raises(ValueError, match="^ks: the largest k"):
        evaluate_retrieval(index, x[:10], ql, ks=(1, 61))
    with pytest.raises(ValueError, match="^query_labels has length 3"):
        evaluate_retrieval(index, x[:10], ql[:3])
