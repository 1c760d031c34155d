"""The training loop every contrastlab experiment uses: :func:`fit`.

A plain PyTorch loop (no framework state): draw ``batch_at(step)``, forward under autocast, loss in
fp32, backward (scaled for fp16), clip, step, schedule. Batches are a pure function of the step and
the checkpoint holds the step, model, optimiser, schedule, grad scaler, RNG states and the running
loss sum, so an interrupted-and-resumed run reproduces the uninterrupted one bit for bit on CPU.
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab.config import to_dict
from contrastlab.io import CorruptFileError, dumps_json_checked, loads_json_verified, write_text_atomic
from contrastlab.train.loop.checkpoint import (
    CheckpointError,
    capture_rng,
    discard_checkpoints,
    latest_checkpoint,
    restore_rng,
    save_checkpoint,
)
from contrastlab.train.loop.config import TrainConfig
from contrastlab.train.loop.grad_cache import cached_backward, check_row_independent
from contrastlab.train.loop.heap import set_mmap_threshold, trim_heap
from contrastlab.train.loop.objective import EmbeddingObjective, split_loss_output
from contrastlab.train.loop.schedule import LRSchedule

__all__ = ["fit", "TrainResult", "Stateful", "resolve_device", "METRICS_NAME"]

METRICS_NAME = "metrics.jsonl"

LossFn = Callable[[nn.Module, Any], "Tensor | tuple[Tensor, dict[str, float]]"]


class Stateful(Protocol):
    """Training state outside the model and optimiser (a queue of negatives, a momentum encoder).

    :func:`fit` saves ``state_dict()`` (tensors and plain containers) in every checkpoint and calls
    ``load_state_dict`` on resume, so the run stays bit-identical across an interruption.
    """

    def state_dict(self) -> dict[str, Any]:
        """The state to save: tensors and plain containers only (loaded with ``weights_only=True``)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...


@dataclass
class TrainResult:
    """What :func:`fit` returns.

    Attributes:
        model: the trained model, in eval mode.
        history: the rows written to ``metrics.jsonl`` (``step``, ``loss``, ``lr``, the loss
            function's logs, ``eval/<name>`` entries), including rows from before a resume.
        final_eval: ``eval_fn(model, steps)`` at the end (empty without ``eval_fn``).
        steps: number of optimiser steps the model has taken.
        seconds: wall-clock seconds of this call.
        resumed_from: the step the run resumed from (0 for a fresh run).
    """

    model: nn.Module
    history: list[dict[str, Any]] = field(default_factory=list)
    final_eval: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    seconds: float = 0.0
    resumed_from: int = 0


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → cuda when available, else cpu; ``"cuda"`` without CUDA raises ``ValueError``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device is {device!r} but CUDA is not available (use 'cpu' or 'auto')")
    return torch.device(device)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True) if batch.device != device else batch
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_to_device(b, device) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def _make_optimizer(params: list[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    o = config.optim
    if o.name == "adam":
        return torch.optim.Adam(params, lr=o.lr, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay)
    return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)


class _Progress:
    """A rich progress bar showing loss and steps/s, or nothing when disabled or not a terminal."""

    def __init__(self, enabled: bool, total: int, start: int) -> None:
        self.bar: Any = None
        self._last = 0.0
        if not (enabled and sys.stderr.isatty()):
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  {task.fields[rate]} step/s"),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            transient=False,
        )
        self.task = self.bar.add_task("train", total=total, completed=start, loss="-", rate="-")
        self.bar.start()
        self._t0, self._s0 = time.perf_counter(), start

    def update(self, step: int, loss: float | None, force: bool = False) -> None:
        if self.bar is None:
            return
        now = time.perf_counter()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        rate = (step - self._s0) / max(now - self._t0, 1e-9)
        fields: dict[str, Any] = {"rate": f"{rate:.1f}"}
        if loss is not None:
            fields["loss"] = f"{loss:.4f}"
        self.bar.update(self.task, completed=step, **fields)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class _SignalCatcher:
    """Turn SIGINT/SIGTERM into a flag checked at step boundaries; restore the old handlers on exit.

    A second SIGINT while the first is pending raises ``KeyboardInterrupt`` at once.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.received: int | None = None
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum

    def __enter__(self) -> _SignalCatcher:
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def _load_for_resume(out: Path, device: torch.device) -> dict[str, Any] | None:
    """The newest good checkpoint in ``out``, the same one on every rank (``None`` when there is none).

    Rank 0 reads first, since reading may set a corrupt newest file aside (a rename); the other ranks
    read after it, when ``out`` holds only what rank 0 settled on. Every rank then checks that all of
    them resume from the same step. Loaded on the CPU: RNG states must stay CPU tensors, and
    ``load_state_dict`` moves the rest.

    Raises:
        CheckpointError: on every rank, when rank 0 found checkpoint files but none loads.
        ValueError: on every rank, when the ranks would resume from different steps (e.g. run folders
            that are not one shared folder).
    """
    state: dict[str, Any] | None = None
    error: CheckpointError | None = None
    if cd.rank() == 0:
        try:
            state = latest_checkpoint(out, map_location="cpu")
        except CheckpointError as e:
            error = e
    # also the barrier that keeps the other ranks from reading before rank 0 is done
    failed = cd.all_reduce_sum(torch.tensor(float(error is not None), dtype=torch.float64, device=device))
    if error is not None:
        raise error
    if float(failed) > 0:
        raise CheckpointError(f"rank 0 found no loadable checkpoint in {out}")
    if cd.rank() != 0:
        state = latest_checkpoint(out, map_location="cpu")
    steps = cd.all_sizes(-1 if state is None else int(state["step"]), device)
    if len(set(steps)) > 1:
        raise ValueError(
            f"out_dir: the ranks found checkpoints of different steps in {out} ({steps}, -1: none); "
            "every rank must resume from one shared run folder"
        )
    return state


def _read_metrics(path: Path, upto_step: int) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` up to ``upto_step``, each verified against its own checksum.

    A last line without its newline was cut by a crash and is dropped quietly; any other row that
    fails its checksum is dropped with a warning naming the file and line.
    """
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            row = loads_json_verified(line, f"{path} line {i}")
        except CorruptFileError as e:
            if i < len(lines):  # not a line cut by a crash
                warnings.warn(f"{e}; the row is dropped from the history", RuntimeWarning, stacklevel=3)
            continue
        if isinstance(row.get("step"), int) and row["step"] <= upto_step:
            rows.append(row)
    return rows


def fit(
    model: nn.Module,
    loss_fn: LossFn | EmbeddingObjective,
    batch_at: Callable[[int], Any],
    config: TrainConfig,
    *,
    out_dir: str | Path | None = None,
    resume: bool = False,
    eval_fn: Callable[[nn.Module, int], dict[str, float]] | None = None,
    on_step: Callable[[nn.Module, int, Tensor], None] | None = None,
    extra_state: Mapping[str, Stateful] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Train ``model`` for ``config.steps`` optimiser steps.

    Step ``s`` (0-based) draws ``batch_at(s)``, moves it to the device, computes
    ``loss_fn(model, batch)`` under autocast (``config.precision``) and casts it to fp32, then
    backward (with a grad scaler for fp16), optional global-norm clipping, the optimiser step at
    learning rate ``lr * lr_factor(s)`` (warm-up + constant/cosine), and ``on_step(model, s + 1, loss)``.
    Every ``log_every`` steps and at the last, a row ``{"step", "loss" (mean since the previous row),
    "lr", "grad_norm", **logs, "eval/<k>"}`` is appended to ``out_dir/metrics.jsonl`` (``grad_norm``: the global
    gradient norm of that step, before clipping); ``eval_fn`` runs (under
    ``torch.no_grad`` in eval mode) every ``eval_every`` steps and at the end.

    Checkpoints go to ``out_dir`` every ``checkpoint_every`` steps, at the end, and on SIGINT/SIGTERM
    (at the end of the running step; then SIGINT raises ``KeyboardInterrupt`` and SIGTERM is passed
    on to the previous handler). With ``resume=True`` the newest good checkpoint in ``out_dir`` is
    loaded (RNG states included), ``metrics.jsonl`` is cut back to its step, and training continues;
    with no checkpoint there it starts afresh.

    Args:
        model: every trainable parameter (a learnable temperature included) must belong to it.
        loss_fn: ``(model, batch) -> loss`` or ``(loss, {name: float})``, or an
            :class:`~contrastlab.train.EmbeddingObjective` (needed by ``config.embed_minibatch``:
            gradient caching, :mod:`contrastlab.train.loop.grad_cache`).
        batch_at: a pure function of the 0-based step returning the batch (tensors, or
            tuples/lists/dicts of them), e.g. seeded by :func:`contrastlab.train.step_generator`.
        config: the loop's settings.
        out_dir: where ``metrics.jsonl`` and checkpoints go (None: nothing is written).
        resume: continue from the newest checkpoint in ``out_dir``.
        eval_fn: ``(model, step) -> {metric: float}``.
        on_step: called after each optimiser step with ``(model, step, loss)``.
        extra_state: named objects with ``state_dict``/``load_state_dict`` (:class:`Stateful`) saved
            in every checkpoint and restored on resume (e.g. a :class:`~contrastlab.train.loop.queue.NegativeQueue`).
        on_row: called on rank 0 with each row after it is appended to ``metrics.jsonl`` (e.g. a
            :class:`~contrastlab.train.job.tensorboard.TensorBoardLog`).
        should_stop: asked after each evaluation (and before the first step of a resumed run): True ends
            training early, with a checkpoint at that step (early stopping; its state belongs in ``extra_state``).

    Returns:
        A :class:`TrainResult`; the model is in eval mode.

    Raises:
        ValueError: ``resume`` without ``out_dir``, a checkpoint from another optimiser or seed or
            with other ``extra_state`` names, ``device`` unavailable, a loss that is not a scalar tensor,
            or ``config.embed_minibatch`` with a ``loss_fn`` that is not an ``EmbeddingObjective`` or a
            model with BatchNorm.
        TypeError: ``extra_state`` entries without ``state_dict``/``load_state_dict``.
        contrastlab.train.CheckpointError: checkpoint files exist but none loads.
        KeyboardInterrupt: on SIGINT, after the checkpoint is written.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir (the directory holding the checkpoint)")
    extra = dict(extra_state or {})
    for key, obj in extra.items():
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
            raise TypeError(
                f"extra_state[{key!r}] must have state_dict() and load_state_dict(), got {type(obj).__name__}"
            )
    if config.embed_minibatch is not None:
        if not isinstance(loss_fn, EmbeddingObjective):
            raise ValueError(
                f"loss_fn: config.embed_minibatch={config.embed_minibatch} caches the gradient of a loss of the "
                f"embeddings; pass an EmbeddingObjective(inputs, loss), got {type(loss_fn).__name__}"
            )
        check_row_independent(model)
    t_start = time.perf_counter()
    # Under torchrun every rank runs this loop on its share of each global batch; rank 0 alone
    # writes metrics and checkpoints, evaluates and shows progress (see docs/distributed.md).
    distributed = cd.is_distributed()
    is_main = cd.rank() == 0
    device = cd.local_device(resolve_device(config.device))
    if config.mmap_threshold_mib and device.type == "cpu":
        set_mmap_threshold(config.mmap_threshold_mib * 2**20)
    out = Path(out_dir) if out_dir is not None else None
    metrics_path = out / METRICS_NAME if out is not None and is_main else None
    if out is not None and is_main:
        out.mkdir(parents=True, exist_ok=True)

    _seed_everything(config.seed)
    model.to(device)
    net: nn.Module = model
    if distributed:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    per_rank_batches = bool(getattr(batch_at, "per_rank", False))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    optimizer = _make_optimizer(params, config)
    schedule = LRSchedule(
        optimizer,
        total_steps=config.steps,
        warmup_steps=config.optim.warmup_steps,
        schedule=config.optim.schedule,
    )
    use_scaler = config.precision == "fp16"
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)

    def autocast() -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None)

    identity = {"seed": config.seed, "optim": to_dict(config.optim), "precision": config.precision}

    start = 0
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    loss_count = 0
    history: list[dict[str, Any]] = []
    if resume and out is not None:
        state = _load_for_resume(out, device)
        if state is not None:
            for key, value in identity.items():
                saved = state.get("identity", {}).get(key)
                if saved != value:
                    raise ValueError(
                        f"config.{key} differs from the checkpoint in {out} ({value!r} vs {saved!r}); "
                        "resume with the config the run started with"
                    )
            saved_extra = state.get("extra", {})
            if sorted(saved_extra) != sorted(extra):
                raise ValueError(
                    f"extra_state has {sorted(extra)} but the checkpoint in {out} has {sorted(saved_extra)}; "
                    "resume with the state the run started with"
                )
            model.load_state_dict(state["model"])
            for name, obj in extra.items():
                obj.load_state_dict(saved_extra[name])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["schedule"])
            if use_scaler and state.get("scaler"):
                scaler.load_state_dict(state["scaler"])
            restore_rng(state["rng"])
            start = int(state["step"])
            loss_sum = state["loss_sum"].to(device=device, dtype=torch.float64)
            loss_count = int(state["loss_count"])
            if metrics_path is not None:  # rank 0 alone keeps the metrics
                history = _read_metrics(metrics_path, start)
                write_text_atomic(metrics_path, "".join(dumps_json_checked(r, line=True) + "\n" for r in history))
    if start == 0 and out is not None and metrics_path is not None:
        # a fresh run in a used folder: drop the old run's metrics and checkpoints, so that a later
        # fallback to checkpoint.prev.pt can never land in another run
        write_text_atomic(metrics_path, "")
        discard_checkpoints(out)

    def checkpoint(step: int) -> None:
        if out is None or not is_main:
            return
        state = {
            "format": 2,
            "step": step,
            "identity": identity,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "scaler": scaler.state_dict() if use_scaler else {},
            "rng": capture_rng(),
            "loss_sum": loss_sum.detach().cpu(),
            "loss_count": loss_count,
            "extra": {key: obj.state_dict() for key, obj in extra.items()},
        }
        save_checkpoint(state, out)

    def run_eval(step: int) -> dict[str, float]:
        if eval_fn is None or not is_main:
            return {}
        model.eval()
        with torch.no_grad():
            result = eval_fn(model, step)
        model.train()
        return {k: float(v) for k, v in result.items()}

    @contextlib.contextmanager
    def metrics_file() -> Iterator[Any]:
        if metrics_path is None:
            yield None
            return
        with open(metrics_path, "a", encoding="utf-8") as f:
            yield f

    final_eval: dict[str, float] = {}
    progress = _Progress(config.progress and is_main, config.steps, start)
    cd.barrier()  # every rank has loaded the checkpoint before rank 0 may write a new one
    last_loss: float | None = None
    model.train()
    try:
        with _SignalCatcher(out is not None) as signals, metrics_file() as mfile:
            stopped = should_stop is not None and should_stop()  # a resumed run that had stopped early
            last = start
            for step in range(start, config.steps):
                if stopped:
                    break
                lr = schedule.apply(step)
                batch = batch_at(step)
                if distributed and not per_rank_batches:
                    batch = cd.shard_rows(batch)
                batch = _to_device(batch, device)
                optimizer.zero_grad(set_to_none=True)
                if config.embed_minibatch is not None:
                    assert isinstance(loss_fn, EmbeddingObjective)
                    loss, logs = cached_backward(
                        model, loss_fn, batch, config.embed_minibatch, net=net, autocast=autocast, scale=scaler.scale
                    )
                else:
                    with autocast():
                        loss, logs = split_loss_output(loss_fn(net, batch))
                    scaler.scale(loss).backward()
                grad_norm: Tensor | None = None
                if config.optim.grad_clip is not None:
                    scaler.unscale_(optimizer)
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip)
                elif (step + 1) % config.log_every == 0 or step + 1 == config.steps:  # the logged step's norm
                    scaler.unscale_(optimizer)
                    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
                scaler.step(optimizer)
                scaler.update()
                if config.trim_memory and device.type == "cpu":
                    trim_heap()
                done = step + 1
                if distributed:
                    # one all-reduce per step: the global loss (mean of the ranks' shares) and whether
                    # any rank caught a signal, so that every rank stops at the same step
                    flag = float(signals.received or 0)
                    both = torch.stack([loss.detach().double(), torch.tensor(flag, dtype=torch.float64, device=device)])
                    both = cd.all_reduce_mean(both)
                    loss_step = both[0]
                    if signals.received is None and float(both[1]) > 0:
                        signals.received = signal.SIGTERM
                else:
                    loss_step = loss.detach()
                loss_sum += loss_step
                loss_count += 1
                if on_step is not None:
                    on_step(model, done, loss.detach())

                row: dict[str, Any] = {}
                if done % config.log_every == 0 or done == config.steps:
                    mean_loss = float(loss_sum) / loss_count
                    if not math.isfinite(mean_loss):
                        raise FloatingPointError(f"loss is {mean_loss} at step {done}; lower optim.lr or use fp32")
                    row = {"step": done, "loss": mean_loss, "lr": lr}
                    if grad_norm is not None:
                        row["grad_norm"] = float(grad_norm)
                    row.update({k: float(v) for k, v in logs.items()})
                    loss_sum.zero_()
                    loss_count = 0
                    last_loss = mean_loss
                last = done
                if done == config.steps or (config.eval_every and done % config.eval_every == 0):
                    ev = run_eval(done)
                    stopped = should_stop is not None and should_stop()
                    if distributed and should_stop is not None:  # rank 0 alone evaluates: every rank stops with it
                        stop_flag = torch.tensor(float(stopped), dtype=torch.float64, device=device)
                        stopped = float(cd.all_reduce_sum(stop_flag)) > 0
                    if done == config.steps or stopped:
                        final_eval = ev
                    row = {"step": done, **row, **{f"eval/{k}": v for k, v in ev.items()}}
                if row:
                    history.append(row)
                    if mfile is not None:
                        mfile.write(dumps_json_checked(row, line=True) + "\n")
                        mfile.flush()
                    if on_row is not None and is_main:
                        on_row(row)
                progress.update(done, last_loss, force=bool(row))

                if signals.received is not None:
                    checkpoint(done)
                    break
                if stopped or done == config.steps or (config.checkpoint_every and done % config.checkpoint_every == 0):
                    checkpoint(done)
            if (start >= config.steps or (stopped and last == start)) and eval_fn is not None:
                final_eval = run_eval(start)  # resumed a finished (or early-stopped) run: evaluate again
        cd.barrier()
    finally:
        progress.close()
    if signals.received is not None:
        if signals.received == signal.SIGINT:
            raise KeyboardInterrupt
        signal.raise_signal(signals.received)
        raise SystemExit(128 + signals.received)
    model.eval()
    return TrainResult(
        model=model,
        history=history,
        final_eval=final_eval,
        steps=last if stopped else max(config.steps, start),
        seconds=time.perf_counter() - t_start,
        resumed_from=start,
    )
