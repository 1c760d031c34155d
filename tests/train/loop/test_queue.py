"""The negative queue: FIFO order, the loss against a naive loop, the momentum update, exact resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _queue_run import run
from torch import nn

from contrastlab import distributed as cd
from contrastlab.losses import info_nce
from contrastlab.train import latest_checkpoint
from contrastlab.train.loop.queue import MomentumEncoder, NegativeQueue, queue_info_nce, queue_objective

REPO = Path(__file__).resolve().parents[3]


def test_fifo_keeps_the_newest_rows_in_order_across_wraps():
    queue = NegativeQueue(5, 1, dtype=torch.float64)
    pushed: list[float] = []
    for n in (2, 0, 3, 4, 1, 7, 5):  # an empty push, wraps mid-push, pushes larger than the queue
        rows = torch.arange(len(pushed), len(pushed) + n, dtype=torch.float64).view(n, 1)
        queue.push(rows)
        pushed += rows.view(-1).tolist()
        assert queue.rows().view(-1).tolist() == pushed[-5:]
        assert len(queue) == min(len(pushed), 5)
    assert torch.equal(queue.shard(), queue.rows())  # one process: the whole queue


def _naive(a: torch.Tensor, p: torch.Tensor, u: torch.Tensor, tau: float) -> float:
    """ℓ_i = −s(a_i, p_i)/τ + log(Σ_j exp s(a_i, p_j)/τ + Σ_m exp s(a_i, u_m)/τ), cosine s, mean over i."""

    def cos(x, y):
        return float(x @ y) / (float(x.norm()) * float(y.norm()))

    total = 0.0
    for i in range(a.shape[0]):
        z = sum(math.exp(cos(a[i], p[j]) / tau) for j in range(p.shape[0]))
        z += sum(math.exp(cos(a[i], u[m]) / tau) for m in range(u.shape[0]))
        total += -cos(a[i], p[i]) / tau + math.log(z)
    return total / a.shape[0]


def test_queue_info_nce_matches_a_naive_loop_and_is_in_batch_infonce_when_empty():
    g = torch.Generator().manual_seed(0)
    a, p = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g, dtype=torch.float64)
    queue = NegativeQueue(8, 3, dtype=torch.float64)
    empty = queue_info_nce(a, p, queue, temperature=0.3)
    assert float(empty) == pytest.approx(float(info_nce(a, p, temperature=0.3)), rel=1e-12)
    queue.push(torch.randn(11, 3, generator=g, dtype=torch.float64))
    got = queue_info_nce(a, p, queue, temperature=0.3)
    assert float(got) == pytest.approx(_naive(a, p, queue.rows(), 0.3), rel=1e-12)


def test_momentum_update_and_no_trainable_parameters():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    key = MomentumEncoder(model, momentum=0.75)
    assert not any(p.requires_grad for p in key.parameters())
    assert set(key.state_dict()) == {"encoder.weight", "encoder.bias"}  # the source is not a submodule
    before = key.encoder.weight.clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    key.update()
    # 0.75 and 0.25 are exact in binary: θ_k = 0.75 θ_k + 0.25 θ_q to one rounding per entry
    torch.testing.assert_close(key.encoder.weight, 0.75 * before + 0.25 * model.weight, rtol=2**-23, atol=0)
    x = torch.randn(4, 3)
    assert not key(x).requires_grad


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: NegativeQueue(0, 3), ValueError, "^size"),
        (lambda: NegativeQueue(4, True), TypeError, "^dim"),
        (lambda: MomentumEncoder(nn.Linear(2, 2), momentum=1.0), ValueError, "^momentum"),
        (lambda: MomentumEncoder(lambda x: x), TypeError, "^encoder"),
        (lambda: queue_objective([]), TypeError, "^queue"),
        (lambda: NegativeQueue(4, 3).push(torch.randn(2, 5)), ValueError, "^keys"),
        (lambda: queue_info_nce(torch.randn(2, 5), torch.randn(2, 5), NegativeQueue(4, 3)), ValueError, "^queue"),
        (lambda: NegativeQueue(4, 3).load_state_dict(NegativeQueue(5, 3).state_dict()), ValueError, "^state"),
    ],
)
def test_bad_input_is_named(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_size_must_be_shared_evenly_by_the_ranks(monkeypatch):
    monkeypatch.setattr(cd, "world_size", lambda: 4)
    with pytest.raises(ValueError, match="^size must be a multiple of the number of ranks 4"):
        NegativeQueue(10, 3)
    NegativeQueue(12, 3)


def test_state_dict_round_trip_continues_identically():
    a = NegativeQueue(7, 2)
    a.push(torch.randn(9, 2))
    b = NegativeQueue(7, 2)
    b.load_state_dict(a.state_dict())
    extra = torch.randn(3, 2)
    a.push(extra)
    b.push(extra)
    assert torch.equal(a.rows(), b.rows()) and (a.ptr, a.count) == (b.ptr, b.count)


def _same_run(x, y):
    (res_x, q_x, k_x), (res_y, q_y, k_y) = x, y
    for p, r in zip(res_x.model.parameters(), res_y.model.parameters(), strict=True):
        assert torch.equal(p, r)
    assert torch.equal(q_x.buffer, q_y.buffer) and (q_x.ptr, q_x.count) == (q_y.ptr, q_y.count)
    for p, r in zip(k_x.parameters(), k_y.parameters(), strict=True):
        assert torch.equal(p, r)
    assert [h["loss"] for h in res_x.history] == [h["loss"] for h in res_y.history]


def test_sigkill_and_resume_with_a_queue_is_bit_identical(tmp_path: Path):
    reference = run(tmp_path / "ref")
    assert reference[1].count == 30  # the queue filled and wrapped
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{Path(__file__).parent}", "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "_queue_run.py"), str(tmp_path / "run"), "13"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    state = latest_checkpoint(tmp_path / "run")
    assert state["step"] == 10 and state["extra"]["queue"]["count"] == 30
    resumed = run(tmp_path / "run", resume=True)
    assert resumed[0].resumed_from == 10
    _same_run(resumed, reference)


def test_resume_without_the_saved_extra_state_is_refused(tmp_path: Path):
    from _queue_run import CONFIG, batch_at, make_model

    from contrastlab.train import fit

    run(tmp_path)
    objective = queue_objective(NegativeQueue(30, 4))
    with pytest.raises(ValueError, match="^extra_state has \\['other'\\]"):
        fit(make_model(), objective, batch_at, CONFIG, out_dir=tmp_path, resume=True,
            extra_state={"other": NegativeQueue(30, 4)})  # fmt: skip


MOCO = REPO / "configs" / "sphere_mlp_moco.yaml"
SHORT_MOCO = [
    "--data.batch_size", "16", "--encoder.hidden", "16", "--negatives.size", "40", "--train.steps", "20",
    "--train.checkpoint_every", "5", "--train.log_every", "2", "--train.eval_every", "0", "--eval.n", "64",
    "--train.optim.warmup_steps", "2", "--loss.learnable_temperature", "true", "--quiet",
]  # fmt: skip


def _train(*args: str, stop_at: int | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{Path(__file__).parent}", "OMP_NUM_THREADS": "1"}
    script = (
        [str(Path(__file__).parent / "_queue_job.py"), str(stop_at)] if stop_at is not None else ["-m", "contrastlab"]
    )
    return subprocess.Popen([sys.executable, *script, "train", str(MOCO), *args, *SHORT_MOCO], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_queue_config_through_the_cli_survives_sigkill_bit_identically(tmp_path: Path):
    """configs/sphere_mlp_moco.yaml (MoCo queue, momentum encoder, learnable τ): killed, resumed, equal to one run."""
    reference = _train("--out", str(tmp_path / "ref"))
    child = _train("--out", str(tmp_path / "run"), stop_at=13)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    assert reference.wait(timeout=600) == 0, reference.stderr.read() if reference.stderr else ""
    killed = latest_checkpoint(tmp_path / "run")
    assert killed["step"] == 10 and killed["extra"]["queue"]["count"] == 40  # filled: 16 + 16 + 16 keys, wrapped
    assert not (tmp_path / "run" / "results.json").exists()
    resumed = _train("--out", str(tmp_path / "run"), "--resume")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read() if resumed.stderr else ""

    ref, got = latest_checkpoint(tmp_path / "ref"), latest_checkpoint(tmp_path / "run")
    assert ref["step"] == got["step"] == 20 and set(got["extra"]) == {"queue", "key_encoder"}
    assert "loss_parameters.learned_temperature.log_scale" in got["model"]
    for part in ("model", "optimizer"):
        flat_ref, flat_got = _tensors(ref[part]), _tensors(got[part])
        assert flat_ref.keys() == flat_got.keys()
        assert all(torch.equal(flat_ref[k], flat_got[k]) for k in flat_ref), part
    for key in ("queue", "key_encoder"):
        flat_ref, flat_got = _tensors(ref["extra"][key]), _tensors(got["extra"][key])
        assert all(torch.equal(flat_ref[k], flat_got[k]) for k in flat_ref), key
    assert got["extra"]["queue"]["ptr"] == ref["extra"]["queue"]["ptr"]
    rows = [json.loads(line) for line in (tmp_path / "ref" / "metrics.jsonl").read_text().splitlines()]
    rows_got = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows if "loss" in r] == [r["loss"] for r in rows_got if "loss" in r]
    res_ref, res_got = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("ref", "run"))
    assert res_got["resumed_from"] == 10 and res_ref["metrics"] == res_got["metrics"]
    assert res_got["metrics"]["learned_temperature"] != 0.1  # τ moved from its initial value


def _tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its dotted path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _tensors(sub, f"{prefix}.{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _tensors(sub, f"{prefix}[{i}]").items()}
    return {prefix: torch.tensor(tree)} if isinstance(tree, (int, float)) else {}
