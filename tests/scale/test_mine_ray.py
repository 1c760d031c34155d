"""``contrastlab mine --engine ray``: the documents in Ray shard actors write the same file as one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_mine import _ours, _world

CASES = {
    "all filters and the probability cap": [
        "--num_negatives", "5", "--range_min", "1", "--range_max", "40", "--margin", "0.02",
        "--relative_margin", "0.01", "--max_score", "0.9", "--min_score", "-0.5", "--max_probability", "0.2",
        "--temperature", "0.1",
    ],
    "random sampling, triplets": ["--sampling", "random", "--seed", "7", "--output_format", "triplet"],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_mining_on_ray_shards_writes_the_one_process_file(tmp_path: Path, ray_cluster, case: str) -> None:
    pairs, emb, _ = _world(tmp_path)
    one = _ours(tmp_path, emb, pairs, *CASES[case], out="one.tsv")
    ray = _ours(
        tmp_path, emb, pairs, *CASES[case], "--engine", "ray", "--address", ray_cluster.address, "--shards", "3",
        out="ray.tsv",
    )  # fmt: skip
    assert one.read_text() == ray.read_text() and one.read_text()
