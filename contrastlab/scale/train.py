"""Training that survives a lost worker: the ``contrastlab train`` job under Ray Train.

:func:`train_on_ray` runs :func:`~contrastlab.train.job.runner.run_job` on ``workers`` Ray Train workers (Ray Train
V2's ``TorchTrainer``, the default of the pinned Ray, imported by its V2 path). Ray Train starts one actor per
rank (one CPU each), joins them in a torch.distributed process group (gloo on CPU) and calls the job on every
rank, which then runs exactly as under ``torchrun``: the same :func:`~contrastlab.train.fit`, every rank
drawing its share of each global batch, rank 0 alone writing ``metrics.jsonl``, the checkpoints and
``results.json`` into the run folder. The run folder must therefore be one folder that every worker sees (one
machine, or a shared filesystem); workers also work in the driver's current folder, so relative paths in the
config mean what they mean to the driver. On a cluster whose nodes are all on 127.0.0.1, gloo is bound to the
loopback interface as well (``GLOO_SOCKET_IFNAME``).

Recovery uses contrastlab's own checkpoints, not Ray Train's. Every attempt of the worker group calls
``run_job(..., resume=True)``: the first attempt of a fresh run finds no checkpoint (:func:`train_on_ray`
discards an older run's checkpoints before it starts) and trains from step 0; when a worker dies (killed,
out of memory, its node lost), Ray Train's failure policy (``FailureConfig(max_failures)``) stops the group
and starts a new one, which resumes from the newest checkpoint in the run folder. The checkpoint holds the
step, model, optimiser, schedule and RNG states and batches are a pure function of the step, so the resumed
run ends with the weights of an uninterrupted one; only the steps since that checkpoint are computed twice.

A failure that is not a lost worker (a bug, a corrupt checkpoint) also fails the group and is retried; after
``max_failures`` restarts the error reaches the caller as :class:`RayTrainFailed`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contrastlab.train.job.runner import JobConfig

__all__ = ["RayTrainFailed", "WorkerTask", "cluster_cpus", "check_workers", "train_on_ray", "run_worker"]

RAY_TRAIN_DIR = "ray-train"
"""Subfolder of the run folder where Ray Train keeps its own run state (it holds no model state)."""

FORWARDED_ENV = ("CONTRASTLAB_DATA",)
"""Environment variables of the driver that the job reads, set on every worker as well."""


class RayTrainFailed(RuntimeError):
    """The worker group failed more than ``max_failures`` times; the message names the ranks and their errors."""


@dataclass(frozen=True)
class WorkerTask:
    """What each Ray Train worker runs: the job, where it writes, and the driver's context."""

    config: JobConfig
    """the job"""
    out_dir: str
    """the run folder, absolute (on a filesystem every worker sees)"""
    cwd: str
    """the driver's current folder, where relative paths of the config are resolved"""
    env: tuple[tuple[str, str], ...] = ()
    """the driver's values of :data:`FORWARDED_ENV` that are set"""


def run_worker(task: WorkerTask) -> None:
    """One rank of the job: join the driver's folder and environment, then resume-or-start the run.

    Ray Train has already initialised the process group, so :mod:`contrastlab.distributed` sees this rank.
    """
    from contrastlab.train.job.runner import run_job

    os.chdir(task.cwd)
    os.environ.update(dict(task.env))
    run_job(task.config, task.out_dir, resume=True)


def _train_loop(loop_config: dict[str, Any]) -> None:
    run_worker(loop_config["task"])


def _loopback_worker_env() -> dict[str, str]:
    """On a cluster whose nodes are all on 127.0.0.1: gloo's sockets on the loopback interface too.

    Gloo binds the address its host name resolves to unless ``GLOO_SOCKET_IFNAME`` names an interface; a
    loopback-only cluster must not listen on the machine's external address.
    """
    import socket

    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if "GLOO_SOCKET_IFNAME" in os.environ or not all(n["NodeManagerAddress"].startswith("127.") for n in nodes):
        return {}
    names = {name for _, name in socket.if_nameindex()}
    return next(({"GLOO_SOCKET_IFNAME": lo} for lo in ("lo", "lo0") if lo in names), {})


def cluster_cpus() -> int:
    """The CPUs of the connected Ray cluster (every alive node's, in use or not)."""
    import ray

    return int(ray.cluster_resources().get("CPU", 0))


def check_workers(workers: int) -> None:
    """Check a worker count against the connected cluster: one CPU per worker.

    Raises:
        ValueError: naming ``workers``: below 1, or more than the cluster's CPUs (Ray Train would wait for
            resources that never come).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    cpus = cluster_cpus()
    if workers > cpus:
        raise ValueError(f"workers must be at most the Ray cluster's {cpus} CPUs (one per worker), got {workers}")


def _describe_failure(error: BaseException) -> str:
    """One clause per failed rank, Ray's own errors (a lost worker) before the errors they caused on the others."""
    failures: dict[int, BaseException] = getattr(error, "worker_failures", None) or {}
    if not failures:
        return " ".join(str(error).split())

    def key(rank: int) -> tuple[bool, int]:
        return (not type(failures[rank]).__module__.startswith("ray."), rank)

    parts = []
    for rank in sorted(failures, key=key):
        err = failures[rank]
        first = (str(err).strip().splitlines() or [""])[0]
        parts.append(f"rank {rank}: {type(err).__name__}: {first[:160]}")
    return "; ".join(parts)


def train_on_ray(
    config: JobConfig, out_dir: str | Path, *, workers: int, max_failures: int = 0, resume: bool = False
) -> dict[str, Any]:
    """Run the job on ``workers`` Ray Train workers, restarting the group from the last checkpoint when one fails.

    Ray must already be initialised (connected to the cluster the workers run on). Before any worker starts,
    the combination is checked and the encoder built here, as :func:`~contrastlab.train.job.runner.run_job` does,
    so that a bad config fails once with its own error instead of once per attempt.

    Args:
        config: the job.
        out_dir: the run folder; every worker must see it at this path (a shared filesystem).
        workers: ranks of the group, one CPU each.
        max_failures: how many times a failed group is restarted (-1: without limit).
        resume: continue the run in ``out_dir`` (otherwise its checkpoints are discarded first).

    Returns:
        The results dict rank 0 wrote to ``out_dir/results.json``.

    Raises:
        ValueError: naming ``workers`` (see :func:`check_workers`) or ``max_failures`` (below -1).
        contrastlab.train.ConfigError: data, encoder and loss do not fit together.
        contrastlab.train.CheckpointError: ``resume`` and the checkpoint files in ``out_dir`` do not load.
        RayTrainFailed: the group failed more than ``max_failures`` times.
    """
    from contrastlab.io import read_json_verified
    from contrastlab.scale.cluster import import_ray
    from contrastlab.train.job.runner import DATA_BUILDERS, build_encoder, check_job
    from contrastlab.train.loop.checkpoint import discard_checkpoints, latest_checkpoint

    if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < -1:
        raise ValueError(f"max_failures must be an integer >= -1 (-1: no limit), got {max_failures!r}")
    if not import_ray(loopback=False).is_initialized():
        raise RuntimeError("train_on_ray needs a connected Ray cluster (contrastlab.scale.cluster.ray_session)")
    from ray.train.torch import TorchConfig
    from ray.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.exceptions import TrainingFailedError
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    check_workers(workers)
    source = DATA_BUILDERS[config.data.name](config)
    check_job(config, source)
    build_encoder(config, source)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if resume:
        latest_checkpoint(out)  # an unusable checkpoint fails here, once, not in every attempt
    else:
        discard_checkpoints(out)  # every attempt resumes; the first must not find an older run's state
    task = WorkerTask(
        config=config,
        out_dir=str(out),
        cwd=os.getcwd(),
        env=tuple((k, os.environ[k]) for k in FORWARDED_ENV if k in os.environ),
    )
    trainer = TorchTrainer(
        _train_loop,
        train_loop_config={"task": task},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(
            name=RAY_TRAIN_DIR,
            storage_path=str(out),
            failure_config=FailureConfig(max_failures=max_failures),
            worker_runtime_env={"env_vars": env} if (env := _loopback_worker_env()) else None,
        ),
    )
    try:
        trainer.fit()
    except TrainingFailedError as e:
        budget = "no limit" if max_failures == -1 else f"{max_failures} restart(s)"
        raise RayTrainFailed(f"training on Ray failed ({budget} allowed): {_describe_failure(e)}") from e
    return read_json_verified(out / "results.json")
