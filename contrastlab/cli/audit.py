"""``contrastlab audit [MODEL]``: audit an embedding model as a search engine, on a corpus or retrieval tasks."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contrastlab.cli._options import UsageError, add_command, add_engine_and_shards, model_overrides, one_line
from contrastlab.cli._runs import print_results

OVERRIDES = True


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab audit``."""
    p = add_command(
        sub,
        "audit",
        model_config(),
        help="audit any embedding model as a search engine (retrieval, softmax search, tails, norms)",
        description="Audit a model (default: the bundled all-MiniLM-L6-v2) on the docstring code corpus or a "
        "pairs file; writes results.json, figures and report.html. Any field can be overridden (--max_queries 500).",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="minilm, a sentence-transformers/Hugging Face folder or cached name, a contrastlab run folder, or a .npy",
    )
    p.add_argument("--pairs", help="TSV/CSV/JSONL file or saved datasets folder of (query, document) pairs")
    p.add_argument(
        "--task",
        metavar="DIR|NAME",
        action="append",
        help="a retrieval task in BEIR's layout (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) or MTEB's hub layout, "
        "or the name of one `contrastlab data get` fetched (scifact: looked up under $CONTRASTLAB_DATA or ./data): "
        "graded nDCG, MAP, recall, precision and MRR as MTEB computes them, with intervals; also writes "
        "mteb_results.json. Repeat it for several tasks (--task scifact --task nfcorpus): the model is loaded once, "
        "OUT/TASK/ is each task's audit and OUT/results.json the table across tasks with their mean",
    )
    p.add_argument(
        "--all-tasks",
        action="store_true",
        help="audit every task under the data root ($CONTRASTLAB_DATA or ./data, as `contrastlab data` lists them), "
        "as several --task",
    )
    p.add_argument("--split", help="with --task: the qrels split audited (default test)")
    p.add_argument("--out", help="output folder (default runs/audit-TIMESTAMP)")
    p.add_argument("--quick", action="store_true", help="200 queries against 2,000 documents, 64 tokens per text")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--compress",
        action="store_true",
        help="also audit each prefix width × storage (float32, int8, binary, PQ) against the full model "
        "(--compress_widths, --compress_pq_bits refine it)",
    )
    add_engine_and_shards(p, "document shards (default: 1 locally, one per Ray node with Ray)")
    return p


def model_config() -> type:
    """The config whose fields ``--FIELD VALUE`` sets after the optional MODEL."""
    from contrastlab.audit import AuditConfig

    return AuditConfig


def refuse_extra(argv: Sequence[str], extra: Sequence[str]) -> None:
    """Refuse ``--task A B`` (B left over): several tasks are written as several ``--task``."""
    for i, arg in enumerate(argv[:-2]):
        if arg == "--task" and argv[i + 2] in extra:
            raise UsageError(
                f"audit: --task takes one task; for several, repeat it: --task {argv[i + 1]} --task {argv[i + 2]}"
            )


def _refuse_a_list_in_one_task(tasks: Sequence[str]) -> None:
    """Refuse ``--task A,B`` when no such folder exists: several tasks are written as several ``--task``."""
    from contrastlab.data.registry import default_data_root

    for t in tasks:
        if ("," in t or t.startswith("[")) and not Path(t).exists() and not (default_data_root() / t).exists():
            names = [n.strip(" '\"") for n in t.strip("[]").split(",") if n.strip()]
            raise UsageError(
                f"audit: --task {t}: one task per --task; for several, repeat it: "
                + " ".join(f"--task {n}" for n in names)
            )


def _tasks(args: argparse.Namespace) -> list[str]:
    """The tasks of ``--task``, or with ``--all-tasks`` every task under the data root."""
    tasks: list[str] = list(args.task or [])
    if args.all_tasks:
        from contrastlab.data.registry import default_data_root
        from contrastlab.tasks import tasks_under

        if tasks:
            raise UsageError("audit: --all-tasks audits every task under the data root; give it or --task, not both")
        tasks = [str(p) for p in tasks_under()]
        if not tasks:
            raise UsageError(
                f"audit: --all-tasks: no task under the data root {default_data_root()} ($CONTRASTLAB_DATA or "
                "./data; contrastlab data get NAME fetches one)"
            )
    _refuse_a_list_in_one_task(tasks)
    return tasks


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Audit ``args.model`` (on ``--task``s, ``--pairs`` or the code corpus) and print the results' tables."""
    from contrastlab.audit import QUICK, AuditConfig
    from contrastlab.audit.run import audit
    from contrastlab.audit.task_suite import audit_tasks
    from contrastlab.config import apply_overrides
    from contrastlab.experiments import default_out_dir

    overrides = model_overrides(args, rest)
    tasks = _tasks(args)
    several = args.all_tasks or len(tasks) > 1
    if len(tasks) == 1 and not several:
        overrides["task"] = tasks[0]
    if args.split is not None:  # the task's qrels split; without a task, the code corpus's split
        overrides["task_split" if tasks else "split"] = args.split
    if args.compress:
        overrides["compress"] = True
    cfg = apply_overrides(QUICK if args.quick else AuditConfig(), overrides)
    out = Path(args.out) if args.out else default_out_dir("audit")
    where: dict[str, Any] = {"engine": args.engine, "address": args.address, "shards": args.shards}
    try:
        results = audit_tasks(cfg, tasks, out, **where) if several else audit(cfg, out, **where)
    except ValueError as e:  # bad input: the message names the argument, file and line
        message = one_line(e)
        if message.startswith("tasks: "):  # the library's list of tasks is the command line's --task
            message = "--task: " + message.removeprefix("tasks: ")
        raise UsageError(f"audit: {message}") from None
    return print_results(results, out)
