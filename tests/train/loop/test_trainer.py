import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from _tiny_run import CONFIG, STEPS, batch_at, eval_fn, loss_fn, make_model

from contrastlab.io import loads_json_verified, seal_zip
from contrastlab.train import CheckpointError, TrainConfig, fit, latest_checkpoint, load_checkpoint
from contrastlab.train.loop.checkpoint import CHECKPOINT_MAGIC, CheckpointWarning, save_checkpoint

REPO = Path(__file__).resolve().parents[3]


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.equal(pa[k], pb[k]), k  # bit for bit


def _metrics(d: Path) -> list[dict]:
    return [
        loads_json_verified(line.encode(), "metrics.jsonl") for line in (d / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("ref")
    result = fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=d, eval_fn=eval_fn)
    return result, d


def test_fit_logs_rows_evals_and_returns_eval_mode(reference) -> None:
    result, d = reference
    assert result.steps == STEPS and not result.model.training
    rows = _metrics(d)
    assert rows == result.history
    assert [r["step"] for r in rows] == list(range(2, STEPS + 1, 2))
    assert all({"loss", "lr", "align", "grad_norm"} <= r.keys() for r in rows)
    assert [r["step"] for r in rows if "eval/norm" in r] == [10, 20, 30]
    assert result.final_eval.keys() == {"norm", "rand"}
    assert (d / "checkpoint.pt").exists() and (d / "checkpoint.prev.pt").exists()
    assert latest_checkpoint(d)["step"] == STEPS


def test_determinism_under_seed(reference) -> None:
    again = fit(make_model(), loss_fn, batch_at, CONFIG, eval_fn=eval_fn)
    _assert_same_params(again.model, reference[0].model)
    assert again.history == reference[0].history
    other = fit(make_model(), loss_fn, batch_at, replace(CONFIG, seed=4), eval_fn=eval_fn)
    # The seed reaches the loss's RNG: the first noise draw under seed 4 is not the one under seed 3 (both are
    # fixed values of torch's CPU generator, so this holds on every machine, not by rounding).
    assert other.history[0]["noise"] != reference[0].history[0]["noise"]


def test_sigint_saves_checkpoint_restores_handler_and_resume_is_exact(reference, tmp_path: Path) -> None:
    def interrupt(model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        if step == 13:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path, eval_fn=eval_fn, on_step=interrupt)
    assert signal.getsignal(signal.SIGINT) is before
    assert latest_checkpoint(tmp_path)["step"] == 13  # saved at the end of the interrupted step
    resumed = fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path, resume=True, eval_fn=eval_fn)
    assert resumed.resumed_from == 13
    _assert_same_params(resumed.model, reference[0].model)
    assert _metrics(tmp_path) == _metrics(reference[1])
    assert resumed.history == reference[0].history and resumed.final_eval == reference[0].final_eval


def _child(out: Path, stop_at: int, *flags: str) -> None:
    """Run ``_tiny_run.py`` in a fresh process; with ``stop_at > 0`` SIGKILL it once it reports that step."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{Path(__file__).parent}", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, str(Path(__file__).parent / "_tiny_run.py"), str(out), str(stop_at), *flags]
    if stop_at == 0:
        subprocess.run(argv, env=env, check=True, timeout=300)
        return
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def _assert_same_as_reference(reference, out: Path) -> None:
    saved = load_checkpoint(out / "checkpoint.pt")
    assert saved["step"] == STEPS
    want = _params(reference[0].model)
    assert saved["model"].keys() == want.keys()
    for k, v in want.items():
        assert torch.equal(saved["model"][k], v), k  # bit for bit
    assert _metrics(out) == _metrics(reference[1])


def test_sigkill_subprocess_then_resume_is_bit_identical(reference, tmp_path: Path) -> None:
    _child(tmp_path, 19)
    assert latest_checkpoint(tmp_path)["step"] == 15
    assert max(r["step"] for r in _metrics(tmp_path)) == 18  # rows past the checkpoint: cut on resume
    resumed = fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path, resume=True, eval_fn=eval_fn)
    _assert_same_params(resumed.model, reference[0].model)
    assert _metrics(tmp_path) == _metrics(reference[1])


@pytest.mark.parametrize("flags", [("--threads", "1"), ("--threads", "2", "--fragment")])
def test_rerun_in_a_fresh_process_is_bit_identical_across_threads_and_heap(reference, tmp_path: Path, flags) -> None:
    # the reference ran in this process: one thread (tests/conftest.py) and pytest's heap
    _child(tmp_path, 0, *flags)
    _assert_same_as_reference(reference, tmp_path)


def test_resume_with_other_threads_and_heap_is_bit_identical(reference, tmp_path: Path) -> None:
    _child(tmp_path, 17, "--threads", "2")  # killed after step 17; the checkpoint is at 15
    _child(tmp_path, 0, "--threads", "1", "--fragment", "--resume")
    _assert_same_as_reference(reference, tmp_path)


def test_truncated_checkpoint_falls_back_to_previous(reference, tmp_path: Path) -> None:
    cfg = replace(CONFIG, steps=10)
    fit(make_model(), loss_fn, batch_at, cfg, out_dir=tmp_path)  # checkpoints at 5 (prev) and 10
    latest = tmp_path / "checkpoint.pt"
    latest.write_bytes(latest.read_bytes()[:200])
    with pytest.warns(RuntimeWarning, match="checkpoint.pt"):
        state = latest_checkpoint(tmp_path)
    assert state["step"] == 5
    assert (tmp_path / "checkpoint.prev.pt").exists()  # the good one is kept
    resumed = fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=STEPS), out_dir=tmp_path, resume=True)
    assert resumed.resumed_from == 5


def _flip_a_weight_byte(path: Path) -> None:
    """Flip one bit in the middle of the largest weight's stored bytes (torch stores tensors uncompressed)."""
    weights = load_checkpoint(path)["model"]
    raw = max(weights.values(), key=torch.Tensor.numel).numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(raw)
    assert at > 0 and data.find(raw, at + 1) == -1
    data[at + len(raw) // 2] ^= 0x04
    path.write_bytes(bytes(data))


def test_flipped_byte_in_a_weight_falls_back_to_previous_with_a_warning(tmp_path: Path) -> None:
    fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=10), out_dir=tmp_path)  # checkpoints at 5 and 10
    latest = tmp_path / "checkpoint.pt"
    _flip_a_weight_byte(latest)
    with pytest.raises(CheckpointError, match="checkpoint.pt is corrupted: its content does not match the SHA-256"):
        load_checkpoint(latest)
    with pytest.warns(CheckpointWarning, match=r"checkpoint.pt is corrupted.*falling back to .*checkpoint.prev.pt"):
        state = latest_checkpoint(tmp_path)
    assert state["step"] == 5
    assert (tmp_path / "checkpoint.pt.corrupt").exists() and not latest.exists()
    resumed = fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=10), out_dir=tmp_path, resume=True)
    assert resumed.resumed_from == 5 and latest_checkpoint(tmp_path)["step"] == 10


def test_both_checkpoints_flipped_is_a_clear_error(tmp_path: Path) -> None:
    fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=10), out_dir=tmp_path)
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        _flip_a_weight_byte(tmp_path / name)
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError, match="checkpoint.prev.pt is corrupted"):
        fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path, resume=True)


def test_checkpoint_holds_only_what_weights_only_loads(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"^state\['extra'\]\['q'\] is a Evil"):
        save_checkpoint({"step": 1, "model": {}, "extra": {"q": Evil()}}, tmp_path)
    assert not list(tmp_path.iterdir())


class _Queue:
    """A stand-in for a queue of negatives: global-RNG-driven state that must survive a resume."""

    def __init__(self) -> None:
        self.buffer = torch.zeros(4, 3)
        self.pushes = 0

    def push(self) -> None:
        self.buffer = torch.roll(self.buffer, 1, 0)
        self.buffer[0] = torch.randn(3)
        self.pushes += 1

    def state_dict(self) -> dict:
        return {"buffer": self.buffer.clone(), "pushes": self.pushes}

    def load_state_dict(self, state: dict) -> None:
        self.buffer, self.pushes = state["buffer"].clone(), int(state["pushes"])


def test_extra_state_is_checkpointed_and_restored_exactly(tmp_path: Path) -> None:
    def run(queue: _Queue, out: Path, resume: bool = False, stop_at: int | None = None):
        def on_step(model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
            queue.push()
            if step == stop_at:
                os.kill(os.getpid(), signal.SIGINT)

        return fit(
            make_model(),
            loss_fn,
            batch_at,
            CONFIG,
            out_dir=out,
            resume=resume,
            on_step=on_step,
            extra_state={"queue": queue},
        )

    straight = _Queue()
    run(straight, tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        run(_Queue(), tmp_path / "b", stop_at=12)
    assert load_checkpoint(tmp_path / "b" / "checkpoint.pt")["extra"]["queue"]["pushes"] == 12
    resumed = _Queue()
    run(resumed, tmp_path / "b", resume=True)
    assert resumed.pushes == straight.pushes == STEPS and torch.equal(resumed.buffer, straight.buffer)
    with pytest.raises(ValueError, match="^extra_state has \\[\\] but the checkpoint"):
        fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path / "b", resume=True)


def test_all_checkpoints_corrupt_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.warns(RuntimeWarning), pytest.raises(CheckpointError, match="checkpoint.pt"):
        fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path, resume=True)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_weights_only_refuses_arbitrary_pickles(tmp_path: Path) -> None:
    # a pickle with a valid header and checksum (as a hostile writer would make it) is still refused
    buffer = io.BytesIO()
    torch.save({"step": 1, "model": {}, "payload": Evil()}, buffer)
    (tmp_path / "checkpoint.pt").write_bytes(seal_zip(buffer.getvalue(), CHECKPOINT_MAGIC))
    with pytest.warns(RuntimeWarning), pytest.raises(CheckpointError, match="unsafe"):
        latest_checkpoint(tmp_path)


def test_a_bare_torch_save_file_has_no_checksum(tmp_path: Path) -> None:
    torch.save({"step": 1, "model": {}}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="has no contrastlab checksum"):
        load_checkpoint(tmp_path / "checkpoint.pt")


def test_a_checkpoint_is_still_a_plain_torch_zip(reference) -> None:
    plain = torch.load(reference[1] / "checkpoint.pt", weights_only=True)  # other tools read it as before
    assert plain["step"] == STEPS and plain.keys() == load_checkpoint(reference[1] / "checkpoint.pt").keys()


def test_resume_with_a_different_optimiser_is_refused(tmp_path: Path) -> None:
    fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=5), out_dir=tmp_path)
    other = replace(CONFIG, optim=replace(CONFIG.optim, lr=1e-2))
    with pytest.raises(ValueError, match="config.optim"):
        fit(make_model(), loss_fn, batch_at, other, out_dir=tmp_path, resume=True)


def test_resume_without_checkpoint_starts_fresh_and_needs_out_dir(tmp_path: Path) -> None:
    r = fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=4), out_dir=tmp_path, resume=True)
    assert r.resumed_from == 0 and r.steps == 4
    with pytest.raises(ValueError, match="out_dir"):
        fit(make_model(), loss_fn, batch_at, CONFIG, resume=True)


def test_bad_loss_and_config_are_named() -> None:
    with pytest.raises(ValueError, match="loss_fn"):
        fit(make_model(), lambda m, b: m(b[0]), batch_at, replace(CONFIG, steps=1))
    with pytest.raises(TypeError, match="config"):
        fit(make_model(), loss_fn, batch_at, {"steps": 3})  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_runs_with_fp32_loss(precision: str) -> None:
    seen = []

    def probe(model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        seen.append(loss.dtype)

    cfg = TrainConfig(steps=6, log_every=3, progress=False, precision=precision)
    r = fit(make_model(), loss_fn, batch_at, cfg, on_step=probe)
    assert set(seen) == {torch.float32}
    assert all(torch.isfinite(torch.tensor(row["loss"])) for row in r.history)


class _Terminated(Exception):
    pass


def test_sigterm_saves_then_passes_on_to_previous_handler(tmp_path: Path) -> None:
    def previous(signum, frame):
        raise _Terminated

    def terminate(model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    old = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(_Terminated):
            fit(make_model(), loss_fn, batch_at, CONFIG, out_dir=tmp_path, on_step=terminate)
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, old)
    assert latest_checkpoint(tmp_path)["step"] == 7


def test_fresh_run_in_a_used_folder_drops_old_checkpoints(tmp_path: Path) -> None:
    fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=10), out_dir=tmp_path)
    assert (tmp_path / "checkpoint.prev.pt").exists()
    fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=3), out_dir=tmp_path)
    assert latest_checkpoint(tmp_path)["step"] == 3
    assert not (tmp_path / "checkpoint.prev.pt").exists()
    assert [r["step"] for r in _metrics(tmp_path)] == [2, 3]


def test_metrics_rows_carry_checksums_and_a_corrupted_row_is_dropped_on_resume(tmp_path: Path) -> None:
    fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=10), out_dir=tmp_path)  # rows at 2, 4, ..., 10
    path = tmp_path / "metrics.jsonl"
    lines = path.read_text().splitlines()
    assert all(json.loads(line)["contrastlab_sha256"] for line in lines)  # each row is plain JSON, checksummed
    # row 2 (step 4) gets a changed digit, which still parses; the last row is cut as by a crash mid-write
    bad = lines[1].replace('"step": 4', '"step": 5')
    path.write_text("\n".join([lines[0], bad, *lines[2:-1], lines[-1][:30]]))
    with pytest.warns(RuntimeWarning, match=r"metrics.jsonl line 2 is corrupted.*dropped") as caught:
        fit(make_model(), loss_fn, batch_at, replace(CONFIG, steps=12), out_dir=tmp_path, resume=True)
    assert len(caught) == 1  # the cut last line is dropped quietly
    assert [r["step"] for r in _metrics(tmp_path)] == [2, 6, 8, 12]  # 4 corrupted, 10 cut: both gone


@pytest.mark.parametrize("cuda", [True, False])
def test_default_device_is_cuda_when_present_else_cpu(monkeypatch: pytest.MonkeyPatch, cuda: bool) -> None:
    from contrastlab.train import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert TrainConfig().device == "auto"
    assert resolve_device(TrainConfig().device) == torch.device("cuda" if cuda else "cpu")
