"""The trainer's own configs: optimiser and schedule (:class:`OptimConfig`), loop (:class:`TrainConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from contrastlab.config import ConfigError, check_fields

__all__ = ["OptimConfig", "TrainConfig"]


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and learning-rate schedule."""

    name: Literal["adam", "adamw", "sgd"] = "adam"
    """optimiser: adam, adamw or sgd"""
    lr: float = 1e-3
    """peak learning rate (reached at the end of warm-up)"""
    weight_decay: float = 0.0
    """L2 penalty (adam, sgd) or decoupled weight decay (adamw)"""
    momentum: float = 0.0
    """heavy-ball momentum, sgd only"""
    warmup_steps: int = 0
    """linear warm-up to lr over this many steps (from lr/warmup_steps; linear: from 0)"""
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    """after warm-up: constant, cosine decay to 0 at the last step, or linear decay reaching 0 after the last step
    (linear: Hugging Face's get_linear_schedule_with_warmup, sentence-transformers' default, warm-up included)"""
    grad_clip: float | None = None
    """clip the global gradient norm to this value (None: no clipping)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.momentum != 0 and self.name != "sgd":
            raise ConfigError(f"momentum applies to sgd only, got momentum={self.momentum} with name={self.name!r}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(f"grad_clip must be > 0 or None, got {self.grad_clip}")


@dataclass(frozen=True)
class TrainConfig:
    """The training loop: length, seed, device, precision, logging, evaluation and checkpoints."""

    steps: int = 1000
    """number of optimiser steps"""
    seed: int = 0
    """seeds torch, numpy and python's random at the start of fit"""
    device: str = "auto"
    """auto (cuda when available, else cpu), cpu, cuda, cuda:N or mps; results.json records the device used"""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """autocast dtype of the forward pass; the loss is always computed in fp32"""
    log_every: int = 50
    """append a row to metrics.jsonl every this many steps (and at the last step)"""
    eval_every: int = 0
    """call eval_fn every this many steps (0: only at the end)"""
    checkpoint_every: int = 0
    """save a checkpoint every this many steps (0: only on SIGINT/SIGTERM and at the end)"""
    progress: bool = True
    """show a progress bar with loss and throughput (only when stderr is a terminal)"""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """optimiser and learning-rate schedule"""
    trim_memory: bool = False
    """on the CPU, give the heap's free pages back to the operating system after each step (glibc's
    malloc_trim; :mod:`contrastlab.train.loop.heap`): the peak resident memory stays at one step's need instead of
    growing with the heap's fragmentation, for the page faults of re-touching the freed memory in the next
    step; changes no computed value"""
    mmap_threshold_mib: int = 0
    """on the CPU, from the start of the run every allocation of at least this many MiB gets a mapping of its
    own, returned to the operating system when freed (glibc's mallopt M_MMAP_THRESHOLD; at most 32, the
    ceiling of glibc's own dynamic threshold, above which a fixed one changes nothing but the dynamic rise;
    :mod:`contrastlab.train.loop.heap`): the heap no longer fragments under a step's activations, for more page
    faults; process-wide, it stays in effect after the run; changes no computed value; 0: glibc's default"""
    embed_minibatch: int | None = None
    """gradient caching (Gao et al. 2021, arXiv 2101.06983): embed this many rows per forward pass and
    back-propagate the cached gradient of the loss (memory of one mini-batch's activations, one extra
    forward); needs an EmbeddingObjective as the loss; None: one forward pass over the whole batch"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps}")
        for name in ("log_every", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.log_every == 0:
            raise ConfigError("log_every must be >= 1, got 0")
        if not 0 <= self.mmap_threshold_mib <= 32:
            raise ConfigError(f"mmap_threshold_mib must be in [0, 32], got {self.mmap_threshold_mib}")
        if self.embed_minibatch is not None and self.embed_minibatch < 1:
            raise ConfigError(f"embed_minibatch must be >= 1 or None, got {self.embed_minibatch}")
        if not (self.device in ("cpu", "cuda", "auto", "mps") or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
