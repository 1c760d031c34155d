"""``log: {tensorboard: true}``: every metrics.jsonl scalar read back from the event files at its step."""

import json
import sys
from pathlib import Path

import pytest

from contrastlab import cli
from contrastlab.config import from_dict
from contrastlab.train import ConfigError
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.runner import run_job

JOB = {
    "data": {"latent_dim": 3, "batch_size": 16},
    "encoder": {"hidden": [8], "out_dim": 3},
    "loss": {"temperature": 0.5, "learnable_temperature": True},
    "train": {"steps": 6, "log_every": 2, "eval_every": 3, "progress": False, "optim": {"lr": 0.01}},
    "eval": {"n": 32},
    "log": {"tensorboard": True},
}


def _scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's event files: tag -> [(step, value)] in step order."""
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(run / "tensorboard"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _expected(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key not in ("step", "_sha256") and isinstance(value, (int, float)):
                out.setdefault(key if "/" in key else f"train/{key}", []).append((row["step"], value))
    return out


def _check(run: Path) -> None:
    """The event files hold exactly metrics.jsonl's scalars, each at its step (float32: TensorBoard's storage),
    plus the learned τ at every row; each step once."""
    got, rows = _scalars(run), _rows(run)
    want = _expected(rows)
    assert {"train/loss", "train/lr", "train/grad_norm", "eval/loss", "eval/alignment"} <= set(want)
    assert set(got) == set(want) | {"train/temperature"}
    for tag, points in want.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        for (_, g), (_, w) in zip(got[tag], points, strict=True):
            assert g == pytest.approx(w, rel=1e-6, abs=1e-30), tag  # float32 rounding is 6e-8 relative
    assert [s for s, _ in got["train/temperature"]] == [r["step"] for r in rows]
    taus = [v for _, v in got["train/temperature"]]
    assert all(0 < t < 10 for t in taus) and taus[0] != taus[-1]  # learned: it moved from 0.5


def test_every_scalar_is_in_the_event_file_at_its_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    run_job(from_dict(JobConfig, JOB), run)
    _check(run)


def test_a_resumed_and_a_repeated_run_hold_each_step_once(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    short = {**JOB, "train": {**JOB["train"], "steps": 3}}
    run_job(from_dict(JobConfig, short), run)
    run_job(from_dict(JobConfig, JOB), run, resume=True)  # steps 4-6 after the checkpoint at 3
    _check(run)
    run_job(from_dict(JobConfig, JOB), run)  # a fresh run in the same folder replaces the curves
    _check(run)


def test_without_the_extra_the_field_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if contrastlab[tensorboard] were not installed
    with pytest.raises(
        ConfigError, match=r"^log\.tensorboard: true needs the tensorboard package: .*contrastlab\[tensorboard\]"
    ):
        from_dict(JobConfig, JOB)
    job = tmp_path / "job.json"
    job.write_text(json.dumps(JOB))
    capsys.readouterr()
    assert cli.main(["train", str(job), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "log.tensorboard" in err and "contrastlab[tensorboard]" in err
    assert not (tmp_path / "run").exists()
