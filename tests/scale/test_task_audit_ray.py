"""``audit --task`` on Ray: the one-process results, shard by shard over two nodes."""

from pathlib import Path

import numpy as np
import pytest

from tests.audit.test_task_audit import write_task
from tests.models.text_models import write_tiny_bert


def test_task_audit_on_ray_equals_the_one_process_audit(ray_cluster, tmp_path: Path) -> None:
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.run import audit

    model = write_tiny_bert(tmp_path / "model", "st")
    task = write_task(tmp_path / "toy")
    cfg = AuditConfig(model=str(model), task=str(task), progress=False, n_boot=100, k_max=16, norm_words=40)
    local = audit(cfg, tmp_path / "local")
    ray = audit(cfg, tmp_path / "ray", engine="ray", address=ray_cluster.address, shards=3)
    assert ray["timing"]["engine"] == {"name": "ray", "shards": 3, "address": ray_cluster.address}
    assert ray["per_query"]["query_ids"] == local["per_query"]["query_ids"]
    for key, values in local["per_query"].items():
        if key != "query_ids":  # the same top-1,000 from exact merges: the same trec_eval scores
            assert np.asarray(ray["per_query"][key]).tolist() == np.asarray(values).tolist(), key
    # τ and the softmax search's sums: float64 merges of the shards, equal up to the order of the sums
    for name in ("tau_star_fold_a", "tau_star_fold_b", "cross_entropy_at_tau_star", "log_partition", "entropy"):
        assert ray["metrics"][name] == pytest.approx(local["metrics"][name], rel=1e-9), name
