"""Exact sharded search on Ray: one actor per shard, each holding a :class:`~contrastlab.search.sharded.ShardSearcher`.

The merge maths lives in :mod:`contrastlab.search.sharded` and is the same for every engine; this module
only decides where the shards live. :class:`RayShards` is a shard group whose ``call`` sends one method
call to every actor and gathers the results in shard order; array arguments (the queries) are put in the
object store once per call, not once per shard. Actors are spread over the cluster's nodes and reserve
``num_cpus`` each (default 0: a shard is memory, and the search's faiss and torch threads run when asked).

:func:`ray_sharded_search` builds a corpus from in-memory ``(ids, embeddings)`` shards (put in the object
store once, then held by the actors); :func:`ray_store_search` has every actor read its own shard of an
embedding store (verified on read), so the embeddings never pass through the driver. Errors raised by a
shard (bad input, a corrupted shard) are raised again here as they were raised there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from torch import Tensor

from contrastlab._checks import check_positive_float
from contrastlab.search.sharded import ShardedSearch, ShardInfo, ShardSearcher

__all__ = ["RayShards", "ray_sharded_search", "ray_store_search", "open_store_search"]

Shards = Sequence[tuple[Tensor | np.ndarray, Tensor | np.ndarray]]


class _ShardHost:
    """The body of a shard actor: loads one shard, then runs :class:`ShardSearcher` methods on it."""

    def __init__(self) -> None:
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

    def close(self) -> None:
        """End the actors."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []


def _actors(ray: ModuleType, n: int, num_cpus: float) -> list[Any]:
    host = ray.remote(_ShardHost)
    return [host.options(num_cpus=num_cpus, scheduling_strategy="SPREAD").remote() for _ in range(n)]


def ray_sharded_search(
    shards: Shards, *, metric: str = "cosine", num_cpus: float = 0.0, ray: ModuleType | None = None
) -> ShardedSearch:
    """A :class:`ShardedSearch` whose shards are held by Ray actors, one per ``(ids, embeddings)`` pair.

    Needs a Ray connection (:func:`contrastlab.scale.cluster.ray_session`, or a test's cluster).

    Args:
        shards: ``(ids (n,), embeddings (n, D))`` per shard.
        metric: ``"cosine"`` or ``"ip"``.
        num_cpus: CPUs each actor reserves.
        ray: the ``ray`` module (default: imported).

    Returns:
        The corpus; call ``close()`` to end the actors.
    """
    ray = ray or _ray()
    check_positive_float("num_cpus", num_cpus, allow_zero=True)
    if not shards:
        raise ValueError("shards: the corpus has no shard")
    actors = _actors(ray, len(shards), num_cpus)
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


def ray_store_search(
    path: str | os.PathLike[str], *, metric: str = "cosine", num_cpus: float = 0.0, ray: ModuleType | None = None
) -> ShardedSearch:
    """A :class:`ShardedSearch` over an embedding store: each actor reads and verifies its own shard.

    The store's folder must be readable from every node (a shared file system, or one machine).

    Raises:
        ValueError: the store or one of its shards is missing, truncated or altered (named).
    """
    from contrastlab.search.store import EmbeddingStore

    ray = ray or _ray()
    check_positive_float("num_cpus", num_cpus, allow_zero=True)
    store = EmbeddingStore.open(path)
    n = len(store.shards)
    if n == 0:
        raise ValueError(f"path {path}: the store has no shard")
    actors = _actors(ray, n, num_cpus)
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
    engine: str = "local",
    metric: str = "cosine",
    model: str | None = None,
    dim: int | None = None,
    ray: ModuleType | None = None,
) -> ShardedSearch:
    """A :class:`ShardedSearch` over an embedding store, in this process or on Ray, checked against expectations.

    Args:
        path: the store's folder.
        engine: ``"local"`` (shards read and held in this process) or ``"ray"`` (one actor per shard).
        metric: ``"cosine"`` or ``"ip"``.
        model: the model the store must have been written by (its manifest's ``model``), if given.
        dim: the dimension its embeddings must have, if given.
        ray: the ``ray`` module for ``engine="ray"``.

    Raises:
        ValueError: naming the store's manifest, for another model or dimension; naming a shard's file for
            a missing, truncated or altered shard.
    """
    from contrastlab.search.store import EmbeddingStore

    store = EmbeddingStore.open(path)
    if model is not None and store.model != model:
        raise ValueError(f"path {path}: the store was written by model {store.model!r}, not {model!r}")
    if dim is not None and store.dim != dim:
        raise ValueError(f"path {path}: the store holds D = {store.dim} embeddings, not D = {dim}")
    if engine == "ray":
        return ray_store_search(path, metric=metric, ray=ray)
    if engine != "local":
        raise ValueError(f"engine must be one of local, ray, got {engine!r}")
    return ShardedSearch.local((store.read_shard(i) for i in range(len(store.shards))), metric=metric)


def _numpy(x: Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def _ray() -> ModuleType:
    from contrastlab.scale.cluster import import_ray

    return import_ray()
