"""Exact sharded search on Ray: one actor per shard, each holding a :class:`~contrastlab.search.sharded.ShardSearcher`.

The merge maths lives in :mod:`contrastlab.search.sharded` and is the same for every engine; this module
only decides where the shards live. :class:`RayShards` is a shard group whose ``call`` sends one method
call to every actor and gathers the results in shard order; array arguments (the queries) are put in the
object store once per call, not once per shard. Actors are dealt round-robin over the cluster's alive
nodes that have a CPU and ``num_cpus`` CPUs, in node-id order (shard ``i`` on node ``i mod nodes``, pinned
there by a hard node affinity), and reserve ``num_cpus`` each (default 0: a shard is memory, and its faiss and torch
threads run when asked).
A query runs on every shard at once, so each actor computes with ``threads`` faiss and torch threads, by
default its node's CPUs divided by the shards on that node (at least one): a worker process otherwise
inherits the driver's ``OMP_NUM_THREADS``, and two shards of 2 OpenMP threads each on 2 cores spin against
each other.

:func:`ray_sharded_search` builds a corpus from in-memory ``(ids, embeddings)`` shards (put in the object
store once, then held by the actors); :func:`ray_store_search` has every actor read its own shard of an
embedding store (verified on read), so the embeddings never pass through the driver. Errors raised by a
shard (bad input, a corrupted shard) are raised again here as they were raised there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from torch import Tensor

from contrastlab._checks import check_choice, check_int, check_positive_float
from contrastlab.scale.cluster import Engine
from contrastlab.search.index import SearchResult
from contrastlab.search.sharded import ShardedSearch, ShardInfo, ShardSearcher, split_rows

__all__ = [
    "RayShards",
    "ray_rows_search",
    "ray_sharded_search",
    "ray_store_search",
    "open_store_search",
    "query_store",
    "shard_threads",
]

Shards = Sequence[tuple[Tensor | np.ndarray, Tensor | np.ndarray]]


class _ShardHost:
    """The body of a shard actor: loads one shard, then runs :class:`ShardSearcher` methods on it."""

    def __init__(self, threads: int) -> None:
        import faiss
        import torch

        faiss.omp_set_num_threads(threads)
        torch.set_num_threads(threads)
        self.shard: ShardSearcher | None = None

    def load(self, ids: np.ndarray, embeddings: np.ndarray, metric: str) -> ShardInfo:
        self.shard = ShardSearcher(ids, embeddings, metric=metric)
        return self.shard.info()

    def load_store_shard(self, path: str, index: int, metric: str) -> ShardInfo:
        from contrastlab.search.store import EmbeddingStore

        ids, embeddings = EmbeddingStore.open(path).read_shard(index)
        return self.load(ids, embeddings, metric)

    def call(self, method: str, *args: Any) -> Any:
        assert self.shard is not None, "shard not loaded"
        return getattr(self.shard, method)(*args)

    def threads(self) -> tuple[int, int]:
        """``(faiss, torch)`` threads of this actor."""
        import faiss
        import torch

        return faiss.omp_get_max_threads(), torch.get_num_threads()

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


def _gather(ray: ModuleType, refs: list[Any]) -> list[Any]:
    """``ray.get`` that raises a shard's own exception (a ValueError naming a file stays a ValueError)."""
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


class RayShards:
    """A shard group of Ray actors (one per shard, in shard order).

    Args:
        ray: the connected ``ray`` module.
        actors: the shard actors.
    """

    def __init__(self, ray: ModuleType, actors: list[Any]) -> None:
        self.ray = ray
        self.actors = actors

    def call(self, method: str, *args: Any) -> list[Any]:
        """Run ``method`` on every shard at once; results in shard order."""
        put = [self.ray.put(a) if isinstance(a, (np.ndarray, Tensor)) else a for a in args]
        return _gather(self.ray, [actor.call.remote(method, *put) for actor in self.actors])

    def nodes(self) -> list[str]:
        """The node id of each shard's actor."""
        return _gather(self.ray, [actor.node.remote() for actor in self.actors])

    def threads(self) -> list[tuple[int, int]]:
        """``(faiss, torch)`` threads of each shard's actor."""
        return _gather(self.ray, [actor.threads.remote() for actor in self.actors])

    def close(self) -> None:
        """End the actors."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []


def shard_threads(node_cpus: Sequence[float], shards: int) -> list[int]:
    """Threads of each shard actor: its node's CPUs divided by the shards on that node, at least 1.

    Shard ``i`` runs on node ``i mod len(node_cpus)``, as :func:`ray_sharded_search` deals them.

    >>> shard_threads([4, 2], 3)
    [2, 2, 2]
    """
    per_node = [len(range(j, shards, len(node_cpus))) for j in range(len(node_cpus))]
    return [max(1, int(node_cpus[i % len(node_cpus)] // per_node[i % len(node_cpus)])) for i in range(shards)]


def shard_nodes(nodes: Sequence[Mapping[str, Any]], num_cpus: float) -> list[tuple[str, float]]:
    """``(node id, CPUs)`` of the nodes shards are dealt over, in node-id order.

    ``nodes`` is ``ray.nodes()``. A node qualifies when it is alive and has at least one CPU and at least
    ``num_cpus``: a head started with ``num_cpus=0`` (the usual way to keep work off a cluster's head) holds
    no shard.

    Raises:
        ValueError: no node qualifies (naming ``num_cpus`` when it is more than any alive node has).
    """
    alive = [(str(node["NodeID"]), float(node["Resources"].get("CPU", 0.0))) for node in nodes if node.get("Alive")]
    chosen = sorted((node_id, cpus) for node_id, cpus in alive if cpus > 0 and cpus >= num_cpus)
    if not chosen:
        most = max((cpus for _, cpus in alive), default=0.0)
        if num_cpus > most:
            raise ValueError(f"num_cpus: {num_cpus:g} CPUs per shard, but no alive node has more than {most:g}")
        raise ValueError("no alive Ray node has a CPU to hold a shard")
    return chosen


def _actors(ray: ModuleType, n: int, num_cpus: float, threads: int | None = None) -> list[Any]:
    """``n`` shard actors dealt round-robin over :func:`shard_nodes`, each pinned to its node.

    The pin is a hard node affinity. Ray's ``SPREAD`` is only best-effort, and a *soft* affinity is ignored
    for an actor that reserves no resources (``num_cpus=0``, the default): Ray then places it on any node,
    so all shards can land on one node.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if threads is not None:
        check_int("threads", threads, minimum=1)
    nodes = shard_nodes(ray.nodes(), num_cpus)
    each = shard_threads([cpus for _, cpus in nodes], n) if threads is None else [threads] * n
    host = ray.remote(_ShardHost)
    return [
        host.options(
            num_cpus=num_cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)][0], soft=False)
        ).remote(each[i])
        for i in range(n)
    ]


def ray_sharded_search(
    shards: Shards,
    *,
    metric: str = "cosine",
    num_cpus: float = 0.0,
    threads: int | None = None,
    ray: ModuleType | None = None,
) -> ShardedSearch:
    """A :class:`ShardedSearch` whose shards are held by Ray actors, one per ``(ids, embeddings)`` pair.

    Needs a Ray connection (:func:`contrastlab.scale.cluster.ray_session`, or a test's cluster).

    Args:
        shards: ``(ids (n,), embeddings (n, D))`` per shard.
        metric: ``"cosine"`` or ``"ip"``.
        num_cpus: CPUs each actor reserves.
        threads: faiss and torch threads of each actor (default: :func:`shard_threads`).
        ray: the ``ray`` module (default: imported).

    Returns:
        The corpus; call ``close()`` to end the actors.
    """
    ray = ray or _ray()
    check_positive_float("num_cpus", num_cpus, allow_zero=True)
    if not shards:
        raise ValueError("shards: the corpus has no shard")
    actors = _actors(ray, len(shards), num_cpus, threads)
    group = RayShards(ray, actors)
    try:
        _gather(
            ray,
            [
                a.load.remote(ray.put(np.asarray(i)), ray.put(_numpy(e)), metric)
                for a, (i, e) in zip(actors, shards, strict=True)
            ],
        )
        return ShardedSearch(group, metric=metric)
    except BaseException:
        group.close()
        raise


def ray_rows_search(
    embeddings: np.ndarray, *, shards: int | None = None, metric: str = "cosine", ray: ModuleType | None = None
) -> ShardedSearch:
    """The rows of one matrix as ``shards`` contiguous Ray shards whose ids are row positions.

    The split is :func:`~contrastlab.search.sharded.split_rows`; ``shards`` defaults to one per alive node.
    """
    ray = ray or _ray()
    n = shards or max(1, sum(1 for node in ray.nodes() if node.get("Alive")))
    return ray_sharded_search(split_rows(embeddings, n), metric=metric, ray=ray)


def ray_store_search(
    path: str | os.PathLike[str],
    *,
    metric: str = "cosine",
    num_cpus: float = 0.0,
    threads: int | None = None,
    ray: ModuleType | None = None,
) -> ShardedSearch:
    """A :class:`ShardedSearch` over an embedding store: each actor reads and verifies its own shard.

    The store's folder must be readable from every node (a shared file system, or one machine). The
    arguments are those of :func:`ray_sharded_search`.

    Raises:
        ValueError: the store or one of its shards is missing, truncated or altered (named).
    """
    from contrastlab.search.store import EmbeddingStore

    ray = ray or _ray()
    check_positive_float("num_cpus", num_cpus, allow_zero=True)
    actors = _actors(ray, len(EmbeddingStore.open(path).shards), num_cpus, threads)
    group = RayShards(ray, actors)
    try:
        _gather(ray, [a.load_store_shard.remote(str(Path(path).resolve()), i, metric) for i, a in enumerate(actors)])
        return ShardedSearch(group, metric=metric)
    except BaseException:
        group.close()
        raise


def open_store_search(
    path: str | os.PathLike[str],
    *,
    ray: ModuleType | None = None,
    metric: str = "cosine",
    model: Mapping[str, Any] | None = None,
    dim: int | None = None,
) -> ShardedSearch:
    """A :class:`ShardedSearch` over an embedding store, in this process or on Ray, checked against expectations.

    Args:
        path: the store's folder.
        ray: a connected ``ray`` module: one actor per shard, each reading its own shard; ``None``: the
            shards are read and held in this process.
        metric: ``"cosine"`` or ``"ip"``.
        model: the model identity the store must have been written by (every key given must match).
        dim: the dimension its embeddings must have.

    Raises:
        ValueError: naming the store's manifest, for another model or dimension or a malformed manifest;
            naming a shard's file for a missing, truncated or altered shard.
    """
    from contrastlab.search.store import EmbeddingStore

    store = EmbeddingStore.open(path, model=model, dim=dim)
    if ray is not None:
        return ray_store_search(path, metric=metric, ray=ray)
    return ShardedSearch.local((store.read_shard(i) for i in range(len(store.shards))), metric=metric)


def query_store(
    path: str | os.PathLike[str],
    queries: np.ndarray,
    k: int,
    *,
    engine: Engine,
    temp_dir: str | os.PathLike[str],
    metric: str = "cosine",
    temperature: float | None = None,
    exclude_self: bool = False,
    model: str | None = None,
) -> tuple[SearchResult, np.ndarray | None]:
    """Exact top-``k`` (and optionally the log-partition) of queries over a store, on the chosen engine.

    The queries follow the store's metric. With ``"cosine"`` they are L2-normalised exactly as the
    store's documents are (:func:`~contrastlab.search.sharded.unit_rows`): raw model outputs and unit
    vectors give the same top-k and the same log-partition (the softmax search of the unit query against
    the unit documents). With ``"ip"`` they are used as given.

    Args:
        path: the store's folder.
        queries: ``(Q, D)`` query embeddings (raw model outputs or unit vectors alike for ``"cosine"``).
        k: results per query.
        engine: ``local`` or ``ray`` (embedded, or at its address).
        temp_dir: the run's folder, for an embedded Ray's temp files.
        metric: ``"cosine"`` or ``"ip"``.
        temperature: also return ``log Z(q)`` ``(Q,)`` float64 of the softmax search at this τ.
        exclude_self: the queries are the store's rows ``0 … Q − 1``: leave each one's own id out.
        model: the name of the model the store must have been written by.

    Returns:
        ``(result, log_partition or None)``.

    Raises:
        ValueError: naming ``queries`` for queries of another dimension than the store's (both named),
            or a query of zero norm under ``"cosine"``; naming the file for a store of another model, a
            missing, truncated or altered shard; naming ``--address`` for an unreachable cluster.
    """
    from contrastlab.scale.cluster import ray_session
    from contrastlab.search.sharded import unit_rows
    from contrastlab.search.store import EmbeddingStore

    metric = check_choice("metric", metric, ("cosine", "ip"))
    store = EmbeddingStore.open(path, model=None if model is None else {"name": model})
    if queries.ndim != 2 or queries.shape[1] != store.dim:
        raise ValueError(
            f"queries: shape {tuple(queries.shape)} is not (Q, {store.dim}): the store {store.path} holds "
            f"{store.dim}-dimensional embeddings, the queries are {queries.shape[-1]}-dimensional"
        )
    unit = unit_rows("queries", queries) if metric == "cosine" else queries  # before Ray starts
    with contextlib.ExitStack() as stack:
        ray = stack.enter_context(ray_session(engine.address, temp_dir=temp_dir)) if engine.is_ray else None
        corpus = open_store_search(path, ray=ray, metric=metric, dim=store.dim)
        stack.callback(corpus.close)
        excl = np.arange(queries.shape[0]) if exclude_self else None
        res = corpus.search(queries, k, exclude_ids=excl)  # the index normalises them as it normalised its rows
        log_z = None if temperature is None else corpus.log_partition(unit, temperature=temperature).numpy()
        return res, log_z


def _numpy(x: Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def _ray() -> ModuleType:
    from contrastlab.scale.cluster import import_ray

    return import_ray()
