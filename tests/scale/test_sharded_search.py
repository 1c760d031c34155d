"""Sharded search on the session's two-node Ray cluster equals the one-process path.

Top-k ids identical (exact ties included), log-partition to 1e-12 (float64) and 1e-6 (float32),
probabilities, entropy, hard-negative mining, a store read shard by shard in the actors, and the audit's
results.json; shard errors arrive as the shard raised them; bad input is one line naming the file or
``--address``, exit 2. Every Ray corpus starts one worker process per shard (seconds each on a loaded
machine), so the fast tests use two or three shards and the rest are marked slow.
"""

from __future__ import annotations

import math
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.search import EmbeddingIndex, entropy, log_partition, log_prob
from contrastlab.search.mining import mine_hard_negatives
from contrastlab.search.sharded import ShardedSearch, exact_topk
from contrastlab.search.softmax import SoftmaxSearch


def _split(ids: np.ndarray, emb: np.ndarray, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    cuts = np.cumsum([0, *sizes])
    assert cuts[-1] == ids.shape[0]
    return [(ids[a:b], emb[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


@pytest.fixture(scope="module")
def ray_mod(ray_cluster):
    import ray

    return ray


def test_shard_threads_share_each_nodes_cpus() -> None:
    from contrastlab.scale.sharded_search import shard_threads

    assert shard_threads([4, 2], 3) == [2, 2, 2]
    assert shard_threads([2, 2], 2) == [2, 2]
    assert shard_threads([2, 2], 64) == [1] * 64
    assert shard_threads([8], 3) == [2, 2, 2]


def test_shard_nodes_are_alive_with_cpus_in_id_order() -> None:
    from contrastlab.scale.sharded_search import shard_nodes

    def node(i: str, cpus: float | None, alive: bool = True) -> dict:
        return {"NodeID": i, "Alive": alive, "Resources": {} if cpus is None else {"CPU": cpus}}

    nodes = [node("c", 4), node("a", 2), node("head", 0), node("b", 8, alive=False), node("gpu-only", None)]
    assert shard_nodes(nodes, 0) == [("a", 2.0), ("c", 4.0)]
    assert shard_nodes(nodes, 3) == [("c", 4.0)]
    with pytest.raises(ValueError, match=r"^num_cpus: 5 CPUs per shard, but no alive node has more than 4$"):
        shard_nodes(nodes, 5)
    with pytest.raises(ValueError, match="no alive Ray node has a CPU"):
        shard_nodes([node("head", 0), node("b", 8, alive=False)], 0)


def test_shards_spread_over_both_nodes_and_topk_ties_match_one_flat_index(ray_mod) -> None:
    from contrastlab.scale.sharded_search import ray_sharded_search

    rng = np.random.default_rng(0)
    emb = rng.integers(-1, 2, size=(300, 4)).astype(np.float32)  # exact integer scores: exact ties
    ids = rng.permutation(300).astype(np.int64) * 5 + 1
    queries = rng.integers(-1, 2, size=(30, 4)).astype(np.float32)
    flat = EmbeddingIndex(4, metric="ip")
    flat.add(emb, ids=ids)
    sharded = ray_sharded_search(_split(ids, emb, [1, 119, 180]), metric="ip", ray=ray_mod)
    try:
        # pinned round-robin in node-id order, over the head and the worker node
        nodes = sorted(n["NodeID"] for n in ray_mod.nodes() if n["Alive"])
        assert sharded.group.nodes() == [nodes[0], nodes[1], nodes[0]]
        # 2 CPUs per node; node 0 holds shards 0 and 2, node 1 shard 1
        assert sharded.group.threads() == [(1, 1), (2, 2), (1, 1)]
        for k in (1, 10, 150):
            _, want, _ = exact_topk(flat, queries, k)
            np.testing.assert_array_equal(sharded.search(queries, k).ids, want)
        local = ShardedSearch.local(_split(ids, emb, [150, 150]), metric="ip")
        excl = ids[:30]
        np.testing.assert_array_equal(
            sharded.search(queries, 8, exclude_ids=excl).ids, local.search(queries, 8, exclude_ids=excl).ids
        )
    finally:
        sharded.close()


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), pytest.param(np.float32, 1e-6, marks=pytest.mark.slow)])
def test_log_partition_probabilities_and_entropy_equal_one_process(ray_mod, dtype: np.dtype, tol: float) -> None:
    from contrastlab.scale.sharded_search import ray_sharded_search

    rng = np.random.default_rng(1)
    emb = rng.normal(size=(600, 8)).astype(dtype)
    queries = rng.normal(size=(12, 8)).astype(dtype)
    ids = np.arange(600, dtype=np.int64)
    sharded = ray_sharded_search(_split(ids, emb, [201, 399]), metric="ip", ray=ray_mod)
    try:
        assert len(set(sharded.group.nodes())) == 2  # actors that reserve no CPU are pinned too
        tau = 0.05
        want = log_partition(queries, emb, temperature=tau)
        torch.testing.assert_close(sharded.log_partition(queries, temperature=tau), want, rtol=tol, atol=0)
        rows = rng.integers(0, 600, size=(12, 4))
        torch.testing.assert_close(
            sharded.log_prob(queries, ids[rows], temperature=tau),
            log_prob(queries, emb, torch.from_numpy(rows), temperature=tau),
            rtol=tol,
            atol=tol,
        )
        torch.testing.assert_close(
            sharded.entropy(queries, temperature=tau),
            entropy(SoftmaxSearch(queries, emb, 1 / tau)),
            rtol=0,
            atol=tol * float(want.abs().max()),
        )
    finally:
        sharded.close()


@pytest.mark.slow
def test_mining_on_ray_equals_the_one_process_miner(ray_mod) -> None:
    from contrastlab.scale.sharded_search import ray_sharded_search

    g = torch.Generator().manual_seed(0)
    centres = torch.randn(6, 8, generator=g)
    corpus = torch.nn.functional.normalize(
        centres[torch.arange(300) % 6] + 0.6 * torch.randn(300, 8, generator=g), dim=1
    )
    pos = torch.randperm(300, generator=g)[:40]
    anchors = torch.nn.functional.normalize(corpus[pos] + 0.15 * torch.randn(40, 8, generator=g), dim=1)
    index = EmbeddingIndex(8, metric="cosine")
    index.add(corpus)
    kw = dict(num_negatives=5, candidates=12, exclude_ids=pos, margin=0.02, max_probability=0.05, temperature=0.1)
    one = mine_hard_negatives(index, anchors, corpus[pos], batch_size=16, block_size=64, **kw)
    sharded = ray_sharded_search(_split(np.arange(300), corpus.numpy(), [100, 200]), metric="cosine", ray=ray_mod)
    try:
        many = mine_hard_negatives(sharded, anchors, corpus[pos], batch_size=16, block_size=64, **kw)
    finally:
        sharded.close()
    assert (one.ids == -1).any()
    np.testing.assert_array_equal(many.ids, one.ids)
    np.testing.assert_allclose(many.log_prob, one.log_prob, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_shard_error_arrives_as_the_shard_raised_it(ray_mod) -> None:
    from contrastlab.scale.sharded_search import ray_sharded_search

    bad = np.ones((3, 4))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="embeddings contains NaN"):
        ray_sharded_search([(np.arange(3), np.ones((3, 4))), (np.arange(3, 6), bad)], metric="ip", ray=ray_mod)
    with pytest.raises(ValueError, match="id 2 occurs in more than one shard"):
        ray_sharded_search([(np.arange(3), np.ones((3, 4))), (np.arange(2, 5), np.ones((3, 4)))], ray=ray_mod)


def test_more_cpus_per_shard_than_any_node_has_is_refused_naming_num_cpus(ray_mod) -> None:
    from contrastlab.scale.sharded_search import ray_sharded_search

    shards = [(np.arange(3), np.ones((3, 4))), (np.arange(3, 6), np.ones((3, 4)))]
    with pytest.raises(ValueError, match=r"num_cpus: 3 CPUs per shard, but no alive node has more than 2"):
        ray_sharded_search(shards, metric="ip", num_cpus=3, ray=ray_mod)


def _synthetic(tmp_path: Path, n: int = 160, d: int = 12) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    q = rng.normal(size=(n, d)).astype(np.float32) * rng.uniform(0.5, 2.0, size=(n, 1)).astype(np.float32)
    doc = q + 0.9 * rng.normal(size=(n, d)).astype(np.float32)
    np.save(tmp_path / "emb.npy", np.concatenate([q, doc]))
    (tmp_path / "pairs.tsv").write_text("".join(f"query number {i}\tdef f{i}(x)\n" for i in range(n)))
    return tmp_path / "emb.npy", tmp_path / "pairs.tsv"


NUMERIC_SKIP = {"timing", "timestamp", "host", "argv", "runtime_s", "out_dir"}


def _assert_same(a: object, b: object, path: str = "") -> None:
    """Equal results.json content: floats to 1e-12 relative (float64 merges), everything else exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) - NUMERIC_SKIP == set(b) - NUMERIC_SKIP, path
        for key in set(a) - NUMERIC_SKIP:
            if key not in ("encode_s", "texts_per_s"):
                _assert_same(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-12), path
    else:
        assert a == b, path


def test_audit_on_ray_writes_the_one_process_results(ray_cluster, tmp_path: Path) -> None:
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.run import audit
    from contrastlab.cli import main
    from contrastlab.io import read_json_verified

    emb, pairs = _synthetic(tmp_path)
    cfg = AuditConfig(model=str(emb), pairs=str(pairs), progress=False, n_boot=50, k_max=64, tail_documents=1000)
    local = audit(cfg, tmp_path / "local")
    assert local["timing"]["engine"] == {"name": "local", "shards": 1, "address": None}
    # the command line, on the running cluster by its address, three shards over two nodes
    argv = ["audit", str(emb), "--pairs", str(pairs), "--out", str(tmp_path / "ray"), "--quiet", "--n_boot", "50"]
    argv += ["--k_max", "64", "--tail_documents", "1000", "--engine", "ray", "--address", ray_cluster.address]
    assert main([*argv, "--shards", "3"]) == 0
    distributed = read_json_verified(tmp_path / "ray" / "results.json")
    _assert_same(distributed, {k: v for k, v in local.items() if k != "out_dir"})
    assert distributed["timing"]["engine"] == {"name": "ray", "shards": 3, "address": ray_cluster.address}
    stages = distributed["timing"]["stages"]
    assert set(stages) == {"engine_s", "inputs_s", "store_s", "index_s", "diagnostics_s", "report_s"}
    assert all(v >= 0 for v in stages.values())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_audit_with_an_unreachable_address_is_one_line_exit_2(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from contrastlab.cli import main

    emb, pairs = _synthetic(tmp_path)
    address = f"127.0.0.1:{_closed_port()}"
    out = tmp_path / "out"
    argv = ["audit", str(emb), "--pairs", str(pairs), "--out", str(out), "--quiet", "--engine", "ray"]
    assert main([*argv, "--address", address]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--address {address}" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["audit", str(emb), "--pairs", str(pairs), "--out", str(out), "--address", address]) == 2
    assert "needs --engine ray" in capsys.readouterr().err
    assert not out.exists()


def _store(tmp_path: Path, n: int = 250, d: int = 8, shard_rows: int = 70) -> tuple[Path, np.ndarray, np.ndarray]:
    from contrastlab.search.store import write_store

    rng = np.random.default_rng(3)
    emb = rng.normal(size=(n, d)).astype(np.float32)
    write_store(tmp_path / "store", emb, model={"name": "lookup", "dim": d}, shard_rows=shard_rows)
    q = rng.normal(size=(6, d)).astype(np.float32)
    np.save(tmp_path / "q.npy", q)
    return tmp_path / "store", emb, q


def _query_argv(store: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["query", str(store), "--queries", str(tmp_path / "q.npy"), "-k", "5", "--metric", "ip", *extra]


def test_query_over_a_store_equals_one_flat_index_and_its_log_partition(tmp_path: Path) -> None:
    from contrastlab.cli import main
    from contrastlab.io import read_json_verified

    store, emb, q = _store(tmp_path)
    out = tmp_path / "r.json"
    assert main([*_query_argv(store, tmp_path, "--temperature", "0.1", "--out", str(out))]) == 0
    got = read_json_verified(out)
    flat = EmbeddingIndex(8, metric="ip")
    flat.add(emb)
    _, want, _ = exact_topk(flat, q, 5)
    np.testing.assert_array_equal(np.array(got["ids"]), want)
    np.testing.assert_allclose(got["log_partition"], log_partition(q, emb, temperature=0.1).numpy(), rtol=1e-6)


def _alter_a_shard(store: Path) -> Path:
    from contrastlab.search.store import EmbeddingStore

    shard = store / EmbeddingStore.open(store).shards[-1].name
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x55  # same size, other content: only the checksum tells
    shard.write_bytes(bytes(data))
    return shard


@pytest.mark.parametrize("case", ["altered shard", "other model", "other dimension"])
def test_a_bad_store_is_one_line_naming_the_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    from contrastlab.cli import main

    store, _, q = _store(tmp_path)
    extra: list[str] = []
    named = [str(store / "manifest.json")]
    if case == "altered shard":
        named = [str(_alter_a_shard(store))]
    elif case == "other model":
        extra = ["--model", "minilm"]
    else:  # the queries are what is wrong: --queries and both dimensions are named, not the store's manifest
        np.save(tmp_path / "q.npy", np.ones((2, 7), dtype=np.float32))
        named = [f"--queries {tmp_path / 'q.npy'}:", "8-dimensional embeddings", "7-dimensional"]
    assert main([*_query_argv(store, tmp_path, "--out", str(tmp_path / "r.json"), *extra)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(n in err for n in named) and "Traceback" not in err, err
    assert case != "other dimension" or "manifest.json" not in err, err
    assert not (tmp_path / "r.json").exists()


def test_a_cosine_store_normalises_the_queries_as_its_documents(tmp_path: Path) -> None:
    """Raw queries (MiniLM-like norms 2 to 6.6) and the same queries as unit vectors give the same results.

    The reference is the softmax search of the float64 unit queries against the float64 unit documents.
    The store's float32 unit vectors move each cosine by at most ~D·2⁻²⁴ ≈ 5e-7, so each logit (and the
    log-sum-exp) by at most 5e-7/τ = 1e-5 at τ = 0.05: the tolerance is 1e-4. The fixture's top-6 scores
    are at least 1e-4 apart, so those rounding errors cannot reorder the top-5.
    """
    from contrastlab.cli import main
    from contrastlab.io import read_json_verified
    from contrastlab.search.store import write_store

    rng = np.random.default_rng(11)
    d, tau = 8, 0.05
    docs = rng.normal(size=(300, d)) * rng.uniform(2.0, 6.6, size=(300, 1))  # raw outputs, not unit vectors
    write_store(tmp_path / "store", docs.astype(np.float32), model={"name": "lookup", "dim": d}, shard_rows=70)
    raw = (rng.normal(size=(6, d)) * rng.uniform(2.0, 6.6, size=(6, 1))).astype(np.float32)
    unit = (raw / np.linalg.norm(raw.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    d64 = docs.astype(np.float32).astype(np.float64)
    d64 /= np.linalg.norm(d64, axis=1, keepdims=True)
    q64 = raw.astype(np.float64) / np.linalg.norm(raw.astype(np.float64), axis=1, keepdims=True)
    cos = q64 @ d64.T
    top = -np.sort(-cos, axis=1)[:, :6]
    assert np.diff(-top, axis=1).min() > 1e-4  # the fixture: no near-tie in the top-6
    want_log_z = np.logaddexp.reduce(cos / tau, axis=1)
    got = {}
    for name, q in (("raw", raw), ("unit", unit), ("raw x 4", raw * 4)):  # x 4 is exact in float32
        np.save(tmp_path / "q.npy", q)
        out = tmp_path / f"{name}.json"
        argv = ["query", str(tmp_path / "store"), "--queries", str(tmp_path / "q.npy"), "-k", "5"]
        assert main([*argv, "--temperature", str(tau), "--out", str(out)]) == 0
        got[name] = read_json_verified(out)
        np.testing.assert_array_equal(np.array(got[name]["ids"]), np.argsort(-cos, axis=1)[:, :5])
        np.testing.assert_allclose(got[name]["log_partition"], want_log_z, rtol=0, atol=1e-4)
        assert (got[name]["metric"], got[name]["queries_normalised"], got[name]["temperature"]) == ("cosine", True, tau)
    assert got["raw"]["log_partition"] == got["raw x 4"]["log_partition"]  # the same bits once normalised
    assert got["raw"]["scores"] == got["raw x 4"]["scores"]
    # first-hit probabilities are the model's, not exp(-49)-small
    first = np.exp(np.array(got["raw"]["scores"])[:, 0] / tau - np.array(got["raw"]["log_partition"]))
    np.testing.assert_allclose(first, np.exp(top[:, 0] / tau - want_log_z), rtol=1e-3)


def test_store_search_on_ray_reads_and_verifies_each_shard_in_its_actor(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from contrastlab.cli import main
    from contrastlab.io import read_json_verified
    from contrastlab.scale.sharded_search import open_store_search

    store, emb, q = _store(tmp_path, shard_rows=125)  # two shards: one per node
    out = tmp_path / "r.json"
    argv = _query_argv(store, tmp_path, "--out", str(out), "--engine", "ray", "--address", ray_cluster.address)
    assert main([*argv, "--temperature", "0.1"]) == 0
    got = read_json_verified(out)
    np.testing.assert_array_equal(np.array(got["ids"]), open_store_search(store, metric="ip").search(q, 5).ids)
    np.testing.assert_allclose(got["log_partition"], log_partition(q, emb, temperature=0.1).numpy(), rtol=1e-6)
    out.unlink()
    shard = _alter_a_shard(store)
    assert main(argv) == 2  # the actor that read the shard found it altered
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(shard) in err
    assert not out.exists()
