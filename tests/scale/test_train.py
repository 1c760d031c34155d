"""``contrastlab train --engine ray``: the job on a Ray Train group equals torchrun, and survives a killed worker.

References are computed once per module: a ``torchrun --nproc_per_node=2`` run and an uninterrupted 2-worker
Ray run of the same job. Both use gloo with 2 ranks and one intra-op thread, so their weights agree to
rounding (1e-6 is the bound stated for the feature; they are in fact identical). The killed run loses rank 1
by SIGKILL at step 12 (its last checkpoint is step 10); Ray Train restarts the group, which resumes from the
run folder and must end with the same weights and metrics as the uninterrupted runs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from contrastlab.cli import main
from contrastlab.io import read_json_verified
from contrastlab.train.loop.checkpoint import load_checkpoint

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs contrastlab[ray]")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
data: {name: sphere, latent_dim: 4, mixing: mlp, batch_size: 64}
views: {kappa: 16.0}
encoder: {hidden: [32, 32], out_dim: 4}
loss: {name: info_nce, temperature: 0.1, symmetric: true}
train:
  steps: 30
  log_every: 5
  checkpoint_every: 5
  progress: false
  optim: {name: adam, lr: 0.003}
eval: {n: 256}
"""
KILL_AT = 12  # rank 1 dies drawing step 12's batch; the newest checkpoint is step 10's


def _params(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoint.pt")["model"]


def _metrics(run: Path) -> list[dict[str, Any]]:
    from contrastlab.io import loads_json_verified

    lines = (run / "metrics.jsonl").read_bytes().splitlines()
    return [loads_json_verified(line, f"{run} line {i}") for i, line in enumerate(lines, 1)]


def _assert_same_run(run: Path, reference: Path) -> None:
    a, b = _params(run), _params(reference)
    assert sorted(a) == sorted(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=f"{k} of {run.name} vs {reference.name}")
    rows, ref = _metrics(run), _metrics(reference)
    assert [r["step"] for r in rows] == [r["step"] for r in ref]
    for r, q in zip(rows, ref, strict=True):
        assert sorted(r) == sorted(q)
        for k in r:
            assert r[k] == pytest.approx(q[k], rel=1e-6, abs=1e-9), (k, r, q)


def _train_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["train", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("job") / "job.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def torchrun_run(job: Path) -> Path:
    out = job.parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "contrastlab", "train"]
    proc = subprocess.run(
        [sys.executable, *args, str(job), "--out", str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def ray_run(job: Path, ray_cluster: Any) -> Path:
    from contrastlab.config import read_config
    from contrastlab.scale.train import train_on_ray
    from contrastlab.train.job.runner import JobConfig

    out = job.parent / "ray"
    results = train_on_ray(read_config(JobConfig, job), out, workers=2, max_failures=0)
    assert results["resumed_from"] == 0
    return out


def test_two_ray_workers_train_the_torchrun_model(
    job: Path, ray_run: Path, torchrun_run: Path, ray_cluster: Any
) -> None:
    _assert_same_run(ray_run, torchrun_run)
    results = read_json_verified(ray_run / "results.json")
    assert results["metrics"] == read_json_verified(torchrun_run / "results.json")["metrics"]
    assert (ray_run / "ray-train").is_dir()  # Ray Train's own run state stays inside the run folder


@pytest.mark.slow
def test_a_killed_worker_restarts_from_the_last_checkpoint_and_ends_equal(
    job: Path, ray_run: Path, torchrun_run: Path, ray_cluster: Any, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    import ray

    import contrastlab.scale.train as scale_train
    from tests.scale import _kill

    ray.cloudpickle.register_pickle_by_value(_kill)  # the workers need not import the tests
    out, marker = job.parent / "killed", job.parent / "killed.pid"
    loop = functools.partial(_kill.killing_loop, kill_at=KILL_AT, rank=1, marker=str(marker))
    monkeypatch.setattr(scale_train, "_train_loop", loop)
    code, stdout, err = _train_cli(
        capsys, str(job), "--out", str(out), "--engine", "ray", "--workers", "2", "--max-failures", "1"
    )
    assert code == 0, err
    assert f"results: {out / 'results.json'}" in stdout
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists()  # the killed worker is gone
    assert read_json_verified(out / "results.json")["resumed_from"] == 10  # the newest checkpoint before the kill
    _assert_same_run(out, ray_run)
    _assert_same_run(out, torchrun_run)


@pytest.mark.slow
def test_a_group_that_fails_more_than_max_failures_is_a_runtime_failure(
    job: Path, ray_cluster: Any, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    import ray

    import contrastlab.scale.train as scale_train
    from tests.scale import _kill

    ray.cloudpickle.register_pickle_by_value(_kill)
    out, marker = job.parent / "failed", job.parent / "failed.pid"
    monkeypatch.setattr(
        scale_train, "_train_loop", functools.partial(_kill.killing_loop, kill_at=3, rank=1, marker=str(marker))
    )
    code, _, err = _train_cli(
        capsys, str(job), "--out", str(out), "--engine", "ray", "--workers", "2", "--max-failures", "0"
    )
    assert code == 1
    # one line, the lost worker first (its health check failed), then what its loss caused on rank 0
    assert len(err.strip().splitlines()) == 1 and "(0 restart(s) allowed): rank 1: " in err, err
    assert not (out / "results.json").exists()


def test_more_workers_than_the_cluster_is_one_line_naming_workers(
    tmp_path: Path, job: Path, ray_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    cpus = int(ray.cluster_resources()["CPU"])
    out = tmp_path / "run"
    code, stdout, err = _train_cli(capsys, str(job), "--out", str(out), "--engine", "ray", "--workers", str(cpus + 1))
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and err.startswith("train: --workers") and f"{cpus} CPUs" in err, err
    assert not (out / "results.json").exists() and not (out / "checkpoint.pt").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--workers", "2"], "need --engine ray"),
        (["--max-failures", "1"], "need --engine ray"),
        (["--engine", "ray"], "needs --workers"),
        (["--engine", "ray", "--workers", "0"], "--workers must be >= 1"),
        (["--engine", "ray", "--workers", "2", "--max-failures", "-2"], "--max-failures must be >= -1"),
    ],
)
def test_engine_flags_are_checked_before_ray_starts(
    tmp_path: Path, job: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, stdout, err = _train_cli(capsys, str(job), "--out", str(tmp_path / "run"), *args)
    assert code == 2 and stdout == "" and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "run").exists()


def test_library_arguments_are_checked_before_ray_is_needed(tmp_path: Path, job: Path) -> None:
    from contrastlab.config import read_config
    from contrastlab.scale.train import check_workers, train_on_ray
    from contrastlab.train.job.runner import JobConfig

    cfg = read_config(JobConfig, job)
    with pytest.raises(ValueError, match="^max_failures must be"):
        train_on_ray(cfg, tmp_path, workers=1, max_failures=-2)
    with pytest.raises(ValueError, match="^workers must be an integer >= 1"):
        check_workers(0)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_an_embedded_ray_refuses_more_workers_than_this_machine_has_cpus(tmp_path: Path, job: Path) -> None:
    # without --address the command starts its own Ray (all of this machine's CPUs) and stops it again
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    workers = (os.cpu_count() or 1) + 1
    args = [str(job), "--out", str(out), "--engine", "ray", "--workers", str(workers)]
    proc = subprocess.run(
        [sys.executable, "-m", "contrastlab", "train", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    assert proc.stderr.startswith(f"train: --workers must be at most the Ray cluster's {workers - 1} CPUs"), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not (out / "results.json").exists() and not (out / "checkpoint.pt").exists()
