"""Benchmark: exact sharded top-k on Ray against one flat index, and the merge's cost as the shards grow.

1. **Sharded vs flat.** ``--rows`` × ``--dim`` unit vectors (default 10^6 × 128) and ``--queries`` queries.
   The exact top-``k`` (order: score descending, id ascending) of one flat :class:`EmbeddingIndex` in this
   process, against the same corpus split into ``--shards`` shards, searched in this process
   (``ShardedSearch.local``) and in one Ray actor per shard. Median of ``--repeats`` timed queries after
   one warm-up; the ids are checked identical; the ratio sharded / flat is printed. Start-up (Ray's start,
   the actors' load of their shards) is timed apart.
2. **Many small shards.** The corpus split into S = 2, 4, …, ``--max-shards`` Ray actors: per S, the query
   time, the merge alone (``merge_topk`` over the S gathered lists, in this process) and the bytes the
   merge moves per query, ``S × k × (4 + 8 + 8)`` (a float32 score, an int64 id and an int64 row position
   per entry), which the cost model of ``docs/scale_search.md`` predicts grow linearly in S.
3. **Log-partition.** ``log Σ_i exp(⟨q, ξ_i⟩/τ)`` for the queries over the sharded corpus on Ray against the
   one-process :func:`~contrastlab.search.log_partition`, with their largest difference.

Ray runs embedded on this machine (loopback only, no dashboard, temp files in a fresh folder), with
``--nodes 2`` as two local nodes sharing the ``--threads`` CPUs, or on a running cluster given by
``--address``. Each shard actor computes with its node's CPUs divided by its shards (at least one thread).

Usage:
    python benchmarks/scale_search.py                                  # the full run (about 2 GB, minutes)
    python benchmarks/scale_search.py --rows 20000 --dim 16 --queries 50 --max-shards 8 --repeats 2   # a check
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _threads  # first: pins the BLAS threads before numpy and torch load
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from contrastlab.search import EmbeddingIndex, log_partition  # noqa: E402
from contrastlab.search.sharded import ShardedSearch, exact_topk, merge_topk  # noqa: E402

ENTRY_BYTES = 4 + 8 + 8  # a float32 score, an int64 id and an int64 row position per merged entry


def _median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    out = fn()  # warm-up (faiss buffers, Ray's first call)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _split(ids: np.ndarray, emb: np.ndarray, shards: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(ids[r], emb[r]) for r in np.array_split(np.arange(ids.shape[0]), shards)]


def _corpus(rows: int, dim: int, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((rows, dim), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    q = rng.standard_normal((queries, dim), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.arange(rows, dtype=np.int64), emb, q


@contextlib.contextmanager
def _local_nodes(nodes: int, tmp: str, cpus: int, store_bytes: int) -> Iterator[Any]:
    """``nodes`` Ray nodes on this machine (Ray's own ``cluster_utils.Cluster``), loopback only, no dashboard."""
    from contrastlab.scale.cluster import LOOPBACK, import_ray, ray_environment

    ray = import_ray(loopback=True)
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": LOOPBACK, "num_cpus": cpus, "object_store_memory": store_bytes}
    with ray_environment(Path(tmp)):  # Ray's address file and an auth token in tmp, the nodes' files in tmp/ray
        cluster = Cluster(initialize_head=False)
        try:
            cluster.add_node(**node, include_dashboard=False, temp_dir=str(Path(tmp) / "ray"))
            for _ in range(nodes - 1):
                cluster.add_node(**node)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
            yield ray
        finally:
            ray.shutdown()
            cluster.shutdown()


def _ray_context(args: argparse.Namespace, tmp: str) -> Any:
    from contrastlab.scale.cluster import ray_session

    if args.nodes > 1 and args.address is None:
        corpus_bytes = args.rows * args.dim * 4  # the shards pass through the object store once
        cpus = max(1, args.threads // args.nodes)  # the nodes share this machine's --threads CPUs
        return _local_nodes(args.nodes, tmp, cpus, 2 * corpus_bytes // args.nodes + (256 << 20))
    return ray_session(args.address, temp_dir=tmp, num_cpus=args.threads)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--shards", type=int, default=2, help="shards of part 1")
    p.add_argument("--max-shards", type=int, default=64, help="largest S of part 2 (powers of two from 2)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=_threads.THREADS, help="threads of this process and Ray's CPUs")
    p.add_argument("--nodes", type=int, default=1, help="local Ray nodes (without --address)")
    p.add_argument("--address", default=None, help="HOST:PORT of a running Ray cluster")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args()
    if args.repeats < 1 or args.shards < 1 or args.max_shards < 2:
        p.error("--repeats and --shards must be >= 1, --max-shards >= 2")
    torch.set_num_threads(args.threads)
    ids, emb, q = _corpus(args.rows, args.dim, args.queries, args.seed)
    k, nq = args.k, args.queries
    report: dict[str, Any] = {"rows": args.rows, "dim": args.dim, "queries": nq, "k": k, "threads": args.threads}

    flat = EmbeddingIndex(args.dim, metric="ip")
    t = time.perf_counter()
    flat.add(emb, ids=ids)
    report["flat_build_s"] = time.perf_counter() - t
    flat_s, (_, flat_ids, _) = _median_time(lambda: exact_topk(flat, q, k), args.repeats)
    raw_s, _ = _median_time(lambda: flat.search(q, k), args.repeats)
    local = ShardedSearch.local(_split(ids, emb, args.shards), metric="ip")
    local_s, local_res = _median_time(lambda: local.search(q, k), args.repeats)
    assert np.array_equal(local_res.ids, flat_ids), "in-process shards disagree with the flat index"
    local.close()
    report.update(flat_topk_s=flat_s, flat_faiss_search_s=raw_s, local_sharded_s=local_s)
    print(f"{args.rows:,} x {args.dim}, {nq} queries, top-{k}, {args.threads} threads")
    print(f"  flat index, exact top-k      {flat_s * 1e3:9.1f} ms  (plain faiss search {raw_s * 1e3:.1f} ms)")
    print(f"  {args.shards} shards in process        {local_s * 1e3:9.1f} ms  ratio {local_s / flat_s:.3f}")

    with tempfile.TemporaryDirectory(prefix="scale-search-", dir="/tmp") as tmp:  # short: unix socket paths
        t = time.perf_counter()
        with _ray_context(args, tmp) as ray:
            report["ray_start_s"] = time.perf_counter() - t
            from contrastlab.scale.sharded_search import ray_sharded_search

            t = time.perf_counter()
            sharded = ray_sharded_search(_split(ids, emb, args.shards), metric="ip", ray=ray)
            report["ray_load_s"] = time.perf_counter() - t
            ray_s, ray_res = _median_time(lambda: sharded.search(q, k), args.repeats)
            assert np.array_equal(ray_res.ids, flat_ids), "Ray shards disagree with the flat index"
            report.update(ray_sharded_s=ray_s, ray_ratio=ray_s / flat_s)
            print(f"  {args.shards} shards on Ray            {ray_s * 1e3:9.1f} ms  ratio {ray_s / flat_s:.3f}")
            print(f"  start-up: Ray {report['ray_start_s']:.1f} s, shards loaded {report['ray_load_s']:.1f} s")

            lz_s, lz = _median_time(lambda: sharded.log_partition(q, temperature=args.temperature), args.repeats)
            one_s, one = _median_time(lambda: log_partition(q, emb, temperature=args.temperature), args.repeats)
            diff = float((lz - one).abs().max() / one.abs().max())
            report.update(ray_log_partition_s=lz_s, one_log_partition_s=one_s, log_partition_rel_diff=diff)
            print(f"  log-partition: Ray {lz_s * 1e3:.1f} ms, one process {one_s * 1e3:.1f} ms, rel. diff {diff:.1e}")
            sharded.close()

            print("  shards   query ms   merge ms   merge bytes/query")
            rows = []
            s = 2
            while s <= args.max_shards:
                many = ray_sharded_search(_split(ids, emb, s), metric="ip", ray=ray)
                q_s, res = _median_time(lambda m=many: m.search(q, k), args.repeats)
                assert np.array_equal(res.ids, flat_ids), f"{s} Ray shards disagree with the flat index"
                parts = many.group.call("topk", q, k, 16384)
                m_s, _ = _median_time(lambda p=parts: merge_topk([x[0] for x in p], [x[1] for x in p], k), args.repeats)
                many.close()
                per_query = s * k * ENTRY_BYTES
                rows.append({"shards": s, "query_s": q_s, "merge_s": m_s, "merge_bytes_per_query": per_query})
                print(f"  {s:6d}   {q_s * 1e3:8.1f}   {m_s * 1e3:8.2f}   {per_query:,}")
                s *= 2
            report["many_shards"] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
