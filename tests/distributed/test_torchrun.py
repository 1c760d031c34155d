"""`torchrun --nproc_per_node=2` (gloo, CPU) trains to the same model as one process on the same global batch."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from contrastlab.train.loop.checkpoint import load_checkpoint

CONFIG = """
data: {name: sphere, latent_dim: 4, mixing: mlp, batch_size: 64}
views: {kappa: 16.0}
encoder: {hidden: [32, 32], out_dim: 4}
loss:
  name: LOSS
  temperature: 0.1
  symmetric: SYM
NEGATIVES
train:
  steps: 25
  log_every: 5
  checkpoint_every: 0
  progress: false
  optim: {name: adam, lr: 0.003}
eval: {n: 256}
"""


def _run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.distributed
@pytest.mark.parametrize(
    "loss,sym,negatives",
    [
        ("info_nce", "true", ""),
        ("info_nce", "false", "negatives: {kind: queue, size: 192, momentum: 0.9}"),  # MoCo: queue + key encoder
        ("siglip", "false", "  learnable_temperature: true\n  learnable_bias: true"),  # loss parameters under DDP
        pytest.param("nt_xent", "false", "", marks=pytest.mark.slow),
    ],
)
def test_torchrun_two_ranks_match_one_process(tmp_path, loss, sym, negatives):
    cfg = tmp_path / "job.yaml"
    cfg.write_text(CONFIG.replace("LOSS", loss).replace("SYM", sym).replace("NEGATIVES", negatives))
    _run([sys.executable, "-m", "contrastlab", "train", str(cfg), "--out", str(tmp_path / "one")], tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "contrastlab",
            "train",
            str(cfg),
            "--out",
            str(tmp_path / "two"),
        ],
        tmp_path,
    )
    one = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    two = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for r1, r2 in zip(one, two, strict=True):
        assert r2["loss"] == pytest.approx(r1["loss"], rel=1e-5), (r1, r2)
    s1 = load_checkpoint(tmp_path / "one" / "checkpoint.pt")["model"]
    s2 = load_checkpoint(tmp_path / "two" / "checkpoint.pt")["model"]
    for k in s1:
        torch.testing.assert_close(s2[k], s1[k], rtol=1e-4, atol=1e-5)
    if "queue" in negatives:  # the queue rank 0 saved (every rank's keys, in rank order) is the one process's queue
        q1 = load_checkpoint(tmp_path / "one" / "checkpoint.pt")["extra"]["queue"]
        q2 = load_checkpoint(tmp_path / "two" / "checkpoint.pt")["extra"]["queue"]
        assert (q1["ptr"], q1["count"]) == (q2["ptr"], q2["count"]) == (25 * 64 % 192, 192)
        torch.testing.assert_close(q2["buffer"], q1["buffer"], rtol=1e-4, atol=1e-5)
    # rank 0 alone wrote the results
    assert json.loads((tmp_path / "two" / "results.json").read_text())["metrics"]["train_loss"] == pytest.approx(
        one[-1]["loss"], rel=1e-5
    )


RESUME_CONFIG = """
data: {name: sphere, latent_dim: 4, mixing: mlp, batch_size: 64}
views: {kappa: 16.0}
encoder: {hidden: [32, 32], out_dim: 4}
loss: {name: info_nce, temperature: 0.1, symmetric: true}
train:
  steps: 300
  log_every: 1
  checkpoint_every: 5
  progress: false
  optim: {name: adam, lr: 0.003, warmup_steps: 20, schedule: cosine}
eval: {n: 256}
"""


def _torchrun(cfg: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "contrastlab", "train", str(cfg), "--out", str(out), *extra,
    ]  # fmt: skip


@pytest.mark.distributed
def test_two_rank_run_stopped_part_way_resumes_to_the_uninterrupted_weights(tmp_path):
    """SIGTERM a 2-rank torchrun run after its first checkpoint, resume it with --resume on 2 ranks: same weights.

    Every rank loads the checkpoint rank 0 wrote (not only rank 0: the other ranks have no metrics file), restores the
    optimiser, schedule and RNG states, and replays the remaining steps: the gloo all-reduce of 2 ranks sums in a
    fixed order, so the resumed run is the uninterrupted one bit for bit.
    """
    cfg = tmp_path / "job.yaml"
    cfg.write_text(RESUME_CONFIG)
    _run(_torchrun(cfg, tmp_path / "straight"), tmp_path)

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(
        _torchrun(cfg, stopped), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not (stopped / "checkpoint.pt").exists():
            assert proc.poll() is None, "the run ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint after 240 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both ranks
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, output[-3000:]
    stopped_at = load_checkpoint(stopped / "checkpoint.pt")["step"]
    assert 5 <= stopped_at < 300, stopped_at  # stopped part-way, at the step the ranks agreed on

    _run(_torchrun(cfg, stopped, "--resume"), tmp_path)
    resumed = json.loads((stopped / "results.json").read_text())
    assert resumed["resumed_from"] == stopped_at
    straight_state = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")
    resumed_state = load_checkpoint(stopped / "checkpoint.pt")
    assert resumed_state["step"] == straight_state["step"] == 300
    for k, v in straight_state["model"].items():
        assert torch.equal(resumed_state["model"][k], v), k
    straight_rows = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    assert (stopped / "metrics.jsonl").read_text().splitlines() == straight_rows  # loss of every step, eval too


@pytest.mark.distributed
def test_only_rank_0_prints_the_summary(tmp_path):
    """Both ranks train; the summary and the ``results:`` line come once, from rank 0 (the rank that wrote them)."""
    cfg = tmp_path / "job.yaml"
    cfg.write_text(
        CONFIG.replace("LOSS", "info_nce").replace("SYM", "true").replace("NEGATIVES", "").replace("25", "2")
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        _torchrun(cfg, tmp_path / "two"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert [x for x in lines if x.startswith("results: ")] == [f"results: {tmp_path / 'two' / 'results.json'}"]
    summary = json.loads((tmp_path / "two" / "results.json").read_text())["summary"]
    assert [x for x in lines if x.startswith("Trained ")] == [summary]
    assert "not computed" not in summary  # rank 0's evaluation, not another rank's
