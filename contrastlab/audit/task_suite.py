"""``audit_tasks(config, tasks)``: one model audited on several retrieval tasks, and its scores across them.

The model is loaded once; each task is then audited exactly as ``audit(config)`` with ``config.task`` audits
it alone (:func:`contrastlab.audit.run.audit_source`: the same seed, draws, intervals and files), into a
sub-folder of the output folder named for the task's folder (``OUT/scifact``, ``OUT/nfcorpus``; two tasks
whose folders share a name take their parent's name too, ``OUT/cqadupstack-android``). ``OUT`` itself gets
a ``results.json`` (``name`` ``audit_tasks``) and a report with one table across the tasks: nDCG@10, MAP@100,
Recall@100 and MRR@10 of each task with its 95% bootstrap interval over that task's queries, and their mean
over tasks — every task weighing the same, as MTEB averages tasks — with a 95% interval from resampling the
queries within each task (:func:`contrastlab.eval.bootstrap.stratified_bootstrap_mean`; the tasks themselves
are fixed, so the interval is about these tasks' queries, not about tasks in general).

``contrastlab compare OUT_A OUT_B`` reads such a folder as a folder of per-task audits. Bad input — no task, a
task named twice (the same folder after name lookup), a name not downloaded, a missing folder or split, a
model that is not a text model — fails before anything is written. The per-task folders are written as each
task finishes and ``OUT/results.json`` last, so an output folder without it is an unfinished audit.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from contrastlab._checks import check_choice, check_int
from contrastlab.audit.config import AuditConfig
from contrastlab.audit.inputs import load_model
from contrastlab.audit.output import write_run_folder
from contrastlab.audit.recorded_prompts import resolve_prompts
from contrastlab.audit.run import ENGINES, _engine_session, audit_source, interval_text, measure_label
from contrastlab.eval.bootstrap import stratified_bootstrap_mean
from contrastlab.search.graded import mteb_name
from contrastlab.tasks import task_folder

__all__ = ["ACROSS", "SUITE_NAME", "audit_tasks", "task_folder_names"]

ACROSS = ("ndcg_cut.10", "map_cut.100", "recall.100", "mrr_cut.10")
"""trec_eval's names of the scores in the table across tasks (nDCG@10 is MTEB's main score)."""

SUITE_NAME = "audit_tasks"
"""The ``name`` of the output folder's ``results.json`` (a per-task audit's is ``audit``)."""


def task_folder_names(folders: Sequence[Path]) -> list[str]:
    """The sub-folder each task is written to: its folder's name, with its parent's where two names repeat.

    Raises:
        ValueError: two tasks would still share a sub-folder (``tasks``).
    """
    names = [f.resolve().name for f in folders]
    names = [f"{f.resolve().parent.name}-{n}" if names.count(n) > 1 else n for f, n in zip(folders, names, strict=True)]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"tasks: two different task folders would both be written to the sub-folder {dup!r}")
    return names


def audit_tasks(
    config: AuditConfig | None,
    tasks: Sequence[str],
    out_dir: str | Path | None = None,
    *,
    engine: str = "local",
    shards: int | None = None,
    address: str | None = None,
) -> dict[str, Any]:
    """Audit one model on several tasks; write one audit folder per task and the table across them.

    Args:
        config: what to audit and how (:class:`~contrastlab.audit.config.AuditConfig`; its ``task`` must be
            unset: the tasks are ``tasks``; ``task_split`` is every task's split).
        tasks: task folders or names ``contrastlab data get`` fetched (looked up under the data root), each once.
        out_dir: the output folder (default ``runs/audit-TIMESTAMP``): ``OUT/<task>/`` per task, ``OUT/results.json``.
        engine: where each corpus is searched, ``"local"`` or ``"ray"`` (as :func:`contrastlab.audit.run.audit`;
            one engine session serves every task).
        shards: number of document shards (default 1 locally, one per Ray node).
        address: ``HOST:PORT`` of a running Ray cluster for ``engine="ray"``.

    Returns:
        The dictionary written to ``OUT/results.json`` (plus ``out_dir``): ``tasks`` (each task's sub-folder
        and identity), ``across_tasks`` (per metric: each task's ``[mean, low, high]`` and the mean over tasks
        with its interval), ``metrics``, ``tables``, ``summary``.

    Raises:
        ValueError: bad input, named — no task, a task given twice, a task not downloaded, missing or without
            the split, a config that also names a task or a pairs file, a ``.npy`` model; nothing is written then.
    """
    cfg = config or AuditConfig()
    if isinstance(tasks, str) or not tasks:
        raise ValueError("tasks: name at least one task (a list of task folders or names)")
    if cfg.task is not None:
        raise ValueError(f"task: the config names the task {cfg.task!r} and tasks are given; name them in one place")
    if cfg.pairs is not None:
        raise ValueError("pairs: give tasks or a pairs file, not both")
    check_choice("engine", engine, ENGINES)
    if shards is not None:
        check_int("shards", shards, 1)
    folders = [task_folder(t, cfg.task_split) for t in tasks]  # a missing name, folder or split fails here
    seen: dict[Path, str] = {}
    for given, folder in zip(tasks, folders, strict=True):
        key = folder.resolve()
        if key in seen:
            raise ValueError(
                f"tasks: {seen[key]!r} and {given!r} are the same task folder ({key}); give each task once"
            )
        seen[key] = given
    names = task_folder_names(folders)
    if Path(cfg.model).suffix == ".npy":
        raise ValueError("model: a task is audited with a text model (its texts are embedded), not a .npy")
    query_prompt, document_prompt = resolve_prompts(cfg.model, cfg.query_prompt, cfg.document_prompt)
    cfg = replace(cfg, query_prompt=query_prompt, document_prompt=document_prompt)  # as audit() records them
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"audit-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    per_task: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    with _engine_session(engine, address, out.parent) as ray:
        t = time.perf_counter()
        encoder = load_model(cfg)
        model_s = time.perf_counter() - t
        for given, name in zip(tasks, names, strict=True):
            t = time.perf_counter()
            res = audit_source(
                replace(cfg, task=str(given)),
                out / name,
                ray=ray,
                shards=shards,
                engine=engine,
                address=address,
                t0=t,
                encoder=encoder,
            )
            seconds[name] = time.perf_counter() - t
            per_task.append(res)
    return _suite_report(cfg, per_task, names, out, started, t0, model_s=model_s, seconds=seconds)


def _suite_report(
    cfg: AuditConfig,
    per_task: list[dict[str, Any]],
    names: list[str],
    out: Path,
    started: _dt.datetime,
    t0: float,
    *,
    model_s: float,
    seconds: dict[str, float],
) -> dict[str, Any]:
    """The output folder's ``results.json`` and report: the table across tasks."""
    import contrastlab
    from contrastlab.host import host_info

    t_report = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    across: dict[str, dict[str, Any]] = {}
    for m in ACROSS:
        key = mteb_name(m)
        values = [np.asarray(res["per_query"][m.replace(".", "_")], dtype=np.float64) for res in per_task]
        across[key] = {
            "per_task": {name: list(res["intervals"][key]) for name, res in zip(names, per_task, strict=True)},
            "mean": list(stratified_bootstrap_mean(values, cfg.n_boot, rng)),
        }
    n_queries = [len(res["per_query"]["query_ids"]) for res in per_task]
    model = str(per_task[0]["model"])
    rows: list[list[Any]] = [
        [name, res["task"]["split"], n, *(interval_text(across[mteb_name(m)]["per_task"][name]) for m in ACROSS)]
        for name, res, n in zip(names, per_task, n_queries, strict=True)
    ]
    rows.append(["mean over tasks", "", sum(n_queries), *(interval_text(across[mteb_name(m)]["mean"]) for m in ACROSS)])
    subset = [name for name, res in zip(names, per_task, strict=True) if res["task"]["subset"]]
    subset_text = (
        f" A seeded subset of the queries or documents of {', '.join(subset)} was audited: those scores are not "
        "comparable with published ones."
        if subset
        else ""
    )
    head = ", ".join(f"{measure_label(m)} = {interval_text(across[mteb_name(m)]['mean'])}" for m in ACROSS[:3])
    main = mteb_name(ACROSS[0])
    each = "; ".join(f"{name} {across[main]['per_task'][name][0]:.4f}" for name in names)
    summary = (
        f"{model} audited on {len(names)} tasks ({sum(n_queries):,} judged queries): mean over tasks {head} "
        f"(each task weighing the same; 95% intervals from resampling the queries within each task). "
        f"{measure_label(ACROSS[0])} per task: {each}.{subset_text} Each task's full audit is in its sub-folder."
    )
    results: dict[str, Any] = {
        "name": SUITE_NAME,
        "summary": summary,
        "metrics": {
            **{f"mean_{mteb_name(m)}": across[mteb_name(m)]["mean"][0] for m in ACROSS},
            "num_tasks": float(len(names)),
            "num_queries": float(sum(n_queries)),
        },
        "tables": [
            {
                "title": "Across tasks: mean and 95% bootstrap interval over each task's queries; their mean over "
                "tasks, queries resampled within each task",
                "columns": ["task", "split", "queries", *(measure_label(m) for m in ACROSS)],
                "rows": rows,
            }
        ],
        "figures": [],
        "model": model,
        "tasks": [
            {"folder": name, **{k: res["task"][k] for k in ("name", "split", "fingerprint", "subset")}}
            for name, res in zip(names, per_task, strict=True)
        ],
        "audits": {name: f"{name}/results.json" for name in names},
        "across_tasks": across,
        "timing": {"model_s": model_s, "tasks_s": seconds, "stages": {}},
        "config": asdict(cfg),
        "version": contrastlab.__version__,
        "timestamp": started.isoformat(timespec="seconds"),
        "host": host_info(),
        "argv": list(sys.argv),
    }
    return write_run_folder(results, out, lambda stage: [], t0=t0, t_report=t_report)
