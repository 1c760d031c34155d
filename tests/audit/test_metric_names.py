"""The audit's metric names depend on its cut-offs only, never on how many documents it searched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.audit import AuditConfig
from contrastlab.audit import diagnostics as diag
from contrastlab.audit.run import audit


def _pairs(n: int, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, d, generator=g, dtype=torch.float64)
    return q, q + 1.5 * torch.randn(n, d, generator=g, dtype=torch.float64)


def test_cut_offs_beyond_the_documents_rank_every_document() -> None:
    ks = (1, 5, 10, 100)
    q, docs = _pairs(50)
    rel = np.arange(50)
    few = diag.retrieval(q, docs, rel, ks)
    many = diag.retrieval(*_pairs(240), np.arange(240), ks)
    assert list(few.metrics) == list(many.metrics) == [
        "recall@1", "recall@5", "recall@10", "recall@100",
        "ndcg@1", "ndcg@5", "ndcg@10", "ndcg@100",
        "mrr@100", "map@r",
    ]  # fmt: skip
    # brute force over all 50 documents: the rank of each query's own document by cosine
    cos = torch.nn.functional.normalize(q, dim=1) @ torch.nn.functional.normalize(docs, dim=1).T
    rank = (cos > cos.diagonal()[:, None]).sum(1).numpy() + 1  # 1-based, no ties in continuous data
    assert few.metrics["mrr@100"].mean == pytest.approx(float(np.mean(1.0 / rank)), abs=1e-12)
    assert few.metrics["recall@100"].mean == 1.0  # every document is ranked
    assert few.metrics["recall@10"].mean == pytest.approx(float(np.mean(rank <= 10)), abs=1e-12)
    assert few.metrics["ndcg@100"].mean == pytest.approx(float(np.mean(1.0 / np.log2(rank + 1))), abs=1e-12)
    assert diag.mrr_key(ks) == "mrr@100" == diag.mrr_key((100, 1))


def test_an_audit_of_a_small_corpus_reports_the_same_metric_names(tmp_path: Path) -> None:
    names = []
    for n in (60, 240):
        q, docs = _pairs(n, d=16, seed=n)
        np.save(tmp_path / f"emb{n}.npy", torch.cat([q, docs]).float().numpy())
        (tmp_path / f"pairs{n}.tsv").write_text("".join(f"query {i}\tdocument {i}\n" for i in range(n)))
        cfg = AuditConfig(
            model=str(tmp_path / f"emb{n}.npy"),
            pairs=str(tmp_path / f"pairs{n}.tsv"),
            progress=False,
            n_boot=20,
            k_max=16,
            tail_documents=200,
        )
        res = audit(cfg, tmp_path / f"out{n}")
        names.append(list(res["metrics"]))
        assert "MRR@100 = " in res["summary"] and "mrr@100" in res["per_query"]
    assert names[0] == names[1]
