"""recipe: fine-tune the bundled all-MiniLM-L6-v2 on a retrieval task's train qrels, by the settings of a recipe file.

The recipe file (``configs/recipe.yaml``; fixed by the SciFact study of docs/tasks.md) holds the ``contrastlab
train`` job without its data and length (``job``: encoder, loss, optimiser), the pairs per step
(``batch_size``), the passes over the data (``epochs``) and the hard-negative mining (``mine``: the options of ``contrastlab mine``, or null for none).
The command reads the task's ``split`` qrels and nothing else: one (query, relevant document) pair per judgement
of grade > 0 of every query of the split. With ``mine``, the base model (the job's encoder) mines each pair's hard negatives among
the pairs' distinct documents (``contrastlab mine``, its softmax-probability cap included) and the job trains on
the mined rows; without, on the task's pairs directly (batches without false negatives either way). It leaves
``OUT/model``, a sentence-transformers folder (moved out of the training run), beside the training run
(``OUT/train``: checkpoint, metrics, the job's ``results.json``), the mined pairs and ``recipe.json`` (the
settings it ran).

    contrastlab run recipe --task scifact --out runs/recipe --seed 0
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import contrastlab
from contrastlab.config import ConfigError, from_dict, load_config_file
from contrastlab.io import write_json_atomic

__all__ = ["Config", "QUICK", "run", "read_recipe", "task_pairs"]

#: The recipe file's keys.
RECIPE_KEYS = ("job", "batch_size", "epochs", "mine")


@dataclass(frozen=True)
class Config:
    """The task the recipe trains on, its seed, and the recipe file."""

    task: str = "scifact"
    """a task folder in BEIR's layout, or the name of one `contrastlab data get` fetched (under
    $CONTRASTLAB_DATA or ./data)"""
    split: str = "train"
    """the qrels split trained on, every query of it; no other split is read"""
    seed: int = 0
    """seeds the job (data order, dropout) and the mining's random sampling"""
    recipe: str = "configs/recipe.yaml"
    """the recipe file; a relative path is looked up in the current folder, then in the repository's"""


QUICK = Config()
"""The recipe as it is (``--quick`` changes nothing: a shorter run would not be the recipe)."""


def recipe_path(recipe: str) -> Path:
    """The recipe file ``recipe`` names: as given, else under the repository root of this package."""
    path = Path(recipe)
    if path.is_absolute() or path.is_file():
        return path
    beside = Path(contrastlab.__file__).resolve().parents[1] / recipe
    return beside if beside.is_file() else path


def read_recipe(recipe: str) -> dict[str, Any]:
    """The recipe file's ``job`` (job fields), ``batch_size`` and ``epochs`` (ints >= 1), ``mine`` (dict or None).

    Raises:
        ConfigError: naming ``recipe`` — a missing file, an unknown or missing key, ``batch_size`` or ``epochs``
            below 1, a
            ``job`` that sets ``data`` or ``train.steps`` (the recipe derives both).
    """
    path = recipe_path(recipe)
    if not path.is_file():
        raise ConfigError(f"recipe: no recipe file at {path}")
    data = load_config_file(path)
    unknown, missing = set(data) - set(RECIPE_KEYS), set(RECIPE_KEYS) - set(data)
    if unknown or missing:
        raise ConfigError(f"recipe: {path} must have exactly the keys {', '.join(RECIPE_KEYS)}")
    for key in ("batch_size", "epochs"):
        if not isinstance(data[key], int) or data[key] < 1:
            raise ConfigError(f"recipe: {key} must be an int >= 1, got {data[key]!r}")
    job = data["job"]
    if not isinstance(job, dict) or "data" in job or "steps" in job.get("train", {}):
        raise ConfigError("recipe: job is a table of job fields without data and train.steps (the recipe sets both)")
    if data["mine"] is not None and not isinstance(data["mine"], dict):
        raise ConfigError("recipe: mine is a table of `contrastlab mine` options, or null")
    return {key: data[key] for key in RECIPE_KEYS}


def task_pairs(task: Any) -> tuple[list[str], list[str]]:
    """(query text, document text) of every judgement of grade > 0 of a :class:`RetrievalTask`, query by query."""
    text = dict(zip(task.doc_ids, task.doc_texts, strict=True))
    anchors, positives = [], []
    for q, qt in zip(task.query_ids, task.query_texts, strict=True):
        for d in task.relevant(q):
            anchors.append(qt)
            positives.append(text[d])
    return anchors, positives


def run(config: Config, out_dir: Path) -> dict:
    """Mine (when the recipe says so), train, and leave ``out_dir/model``."""
    from contrastlab.data.text.pairs import TextPairs, write_text_pairs
    from contrastlab.mine import MineConfig, mine_pairs
    from contrastlab.tasks import read_beir_task
    from contrastlab.tasks.resolve import resolve_task_path
    from contrastlab.train.job.config import EncoderConfig, JobConfig
    from contrastlab.train.job.runner import run_job

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recipe = read_recipe(config.recipe)
    task_dir = resolve_task_path(config.task)
    anchors, positives = task_pairs(read_beir_task(task_dir, config.split))
    if len(anchors) < 2:
        raise ConfigError(f"task: split {config.split!r} of {task_dir} has fewer than two relevant pairs")
    job, batch = recipe["job"], recipe["batch_size"]
    steps = recipe["epochs"] * max(1, len(anchors) // batch)
    mined = None
    if recipe["mine"] is None:
        source = {"kind": "task", "path": str(task_dir), "split": config.split, "part": "all"}
        data: dict[str, Any] = {"name": "sources", "batch_size": batch, "sources": {"datasets": [source]}}
    else:
        pairs_file = out_dir / "pairs.jsonl"
        write_text_pairs(TextPairs(tuple(zip(anchors, positives, strict=True))), pairs_file)
        mined = out_dir / "mined.jsonl"
        encoder = from_dict(EncoderConfig, job.get("encoder", {}))
        base = encoder.path or encoder.name  # the model the job starts from mines its negatives
        options = {"model": base, "seed": config.seed, "progress": False, **recipe["mine"]}
        mine_pairs(from_dict(MineConfig, {**options, "pairs": str(pairs_file)}), mined)
        data = {"name": "text", "batch_size": batch, "text": {"path": str(mined)}}
    train = {**job.get("train", {}), "steps": steps, "seed": config.seed, "progress": False}
    job_config = from_dict(JobConfig, {**job, "data": data, "train": train})
    train_dir = out_dir / "train"
    results = run_job(job_config, train_dir)
    shutil.rmtree(out_dir / "model", ignore_errors=True)  # a rerun into the same folder replaces the model
    os.replace(train_dir / results["model_folder"], out_dir / "model")
    record = {"task": str(task_dir), "split": config.split, "pairs": len(anchors), "steps": steps, **recipe}
    write_json_atomic(out_dir / "recipe.json", record)
    return {
        "summary": (
            f"recipe on {task_dir.name} ({config.split}: {len(anchors)} pairs), {steps} steps of {batch}"
            + (f", hard negatives mined into {mined.name}" if mined else "")
            + f"; the model is {out_dir / 'model'}"
        ),
        "metrics": {"train_loss": float(results["metrics"]["train_loss"]), "steps": float(steps)},
        "tables": [],
        "figures": [],
    }
