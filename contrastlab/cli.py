"""The ``contrastlab`` command: ``train | eval | export | run | report | audit | compare | encode | query | mine | data | search``.

Exit codes scripts can rely on: 0 success, 1 runtime failure, 2 usage error (bad argument, unknown
field, missing file or data set, unusable checkpoint), 130 interrupted by Ctrl-C (after the checkpoint is written). A user mistake
prints one line, never a traceback; set ``CONTRASTLAB_DEBUG=1`` to see tracebacks of failures.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["main", "UsageError", "DATA_FILES"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A mistake in the command line or its inputs; reported as one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line (exit 2) instead of usage + message.

    Abbreviations are off, so an override such as ``--res`` is never taken for ``--resume``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _split_overrides(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split a command's arguments into its own (options and positionals) and ``--FIELD VALUE`` overrides.

    An option the command's parser knows keeps its value (``--out DIR``, ``--quick``); any other
    ``--name`` takes the next argument as its value (``--name=value`` the same), so an override's value
    is never mistaken for an optional positional argument, wherever the positionals are.

    Raises:
        UsageError: an override without a value (the end of the line, or another ``--option`` next).
    """
    kept, overrides, _ = _split_arguments(parser, argv)
    return kept, overrides


def _split_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """:func:`_split_overrides`, and the bare arguments that follow each override's value.

    The third item maps ``--name`` to its value then the bare arguments written right after it (before the
    next option): ``--generators linear monomial`` gives ``{"--generators": ["linear", "monomial"]}``.
    """
    known = parser._option_string_actions
    kept: list[str] = []
    overrides: list[str] = []
    trailing: dict[str, list[str]] = {}
    last: str | None = None  # the override whose value was the previous argument
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg.startswith("-") and name in known:
            takes_value = known[name].nargs != 0 and "=" not in arg
            kept.extend(argv[i : i + 2] if takes_value else argv[i : i + 1])
            i += 2 if takes_value else 1
            last = None
        elif arg.startswith("--") and len(arg) > 2:
            if "=" in arg:
                overrides.append(arg)
                last = name
                trailing[name] = [arg.split("=", 1)[1]]
                i += 1
                continue
            value = argv[i + 1] if i + 1 < len(argv) else None
            if value is None or (value.startswith("--") and len(value) > 2):
                after = "" if value is None else f" (got the option {value})"
                raise UsageError(f"{parser.prog}: {arg} needs a value{after}")
            overrides.extend((arg, value))
            last = arg
            trailing[arg] = [value]
            i += 2
        else:
            kept.append(arg)
            if last is not None and not arg.startswith("-"):
                trailing[last].append(arg)
            else:
                last = None
            i += 1
    return kept, overrides, {k: v for k, v in trailing.items() if len(v) > 1}


def _refuse_extra(prog: str, extra: Sequence[str], trailing: dict[str, list[str]]) -> NoReturn:
    """Raise the one-line error for arguments no parser took: a list written with spaces is named as such."""
    from contrastlab.config import LIST_FORMS

    for flag, values in trailing.items():
        if any(x in values[1:] for x in extra):
            raise UsageError(
                f"{prog}: {flag} takes one value; {LIST_FORMS}: {flag} {','.join(values)} or "
                f"{flag} '[{', '.join(values)}]', not values separated by spaces"
            )
    raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extra)} (see {prog} --help)")


def _numbers_of(cls: type, flag: str) -> type | None:
    """``int`` or ``float`` when the field ``--flag`` of ``cls`` holds numbers (one, a list, or ``None``); else ``None``."""
    import dataclasses
    import types
    import typing

    name = flag[2:].replace("-", "_")
    if not dataclasses.is_dataclass(cls) or name not in {f.name for f in dataclasses.fields(cls)}:
        return None
    tp = typing.get_type_hints(cls)[name]
    kinds = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for kind in kinds:
        if typing.get_origin(kind) in (tuple, list):
            kind = (typing.get_args(kind) or (None,))[0]
        if kind in (int, float):
            return kind
    return None


def _refuse_a_number_taken_for_the_model(
    prog: str, cls: type, model: str | None, trailing: dict[str, list[str]]
) -> None:
    """Refuse ``--ks 1 5`` where the optional MODEL would take the ``5``: a list written with spaces, not a model.

    The bare argument right after an override's value is MODEL unless the field holds numbers, the argument reads
    as one, and no file or folder has that name; then it is refused as a list written with spaces is everywhere.
    """
    for flag, values in trailing.items():
        kind = _numbers_of(cls, flag)
        if model is None or kind is None or values[1:] != [model] or Path(model).exists():
            continue
        try:
            kind(model)
        except ValueError:
            continue
        _refuse_extra(prog, [model], {flag: values})


def _fields_help(cls: type) -> str:
    from contrastlab.config import LIST_FORMS, describe_fields

    rows = describe_fields(cls)
    width = max((len(n) for n, _, _ in rows), default=0)
    lines = [f"  {n:<{width}}  {doc} [default: {d}]" for n, d, doc in rows]
    return f"config fields (set in the file or override on the command line; {LIST_FORMS}):\n" + "\n".join(lines)


# --------------------------------------------------------------------------------------------- train


def _load_job(path: str, overrides: Sequence[str]) -> Any:
    from contrastlab.config import apply_overrides, parse_overrides, read_config
    from contrastlab.train.job.config import JobConfig

    cfg = read_config(JobConfig, path)  # a config.json contrastlab wrote (a previous run's) is verified
    return apply_overrides(cfg, parse_overrides(overrides)) if overrides else cfg


def _cmd_train(args: argparse.Namespace, rest: list[str]) -> int:
    from dataclasses import replace

    from contrastlab.experiments import default_out_dir
    from contrastlab.train.job.runner import run_job

    cfg = _load_job(args.config, rest)
    if args.quiet:
        cfg = replace(cfg, train=replace(cfg.train, progress=False))
    out = Path(args.out) if args.out else Path(cfg.out) if cfg.out else None
    if out is None:
        if args.resume:
            raise UsageError("train: --resume needs --out DIR (the folder of the run to continue)")
        out = default_out_dir("train")
    if args.engine != "local" or args.workers is not None or args.max_failures is not None:
        return _train_on_ray(args, cfg, out)
    try:
        results = run_job(cfg, out, resume=args.resume)
    except KeyboardInterrupt:
        print(f"interrupted; checkpoint saved in {out} (continue with --out {out} --resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    _print_summary(results["summary"], out / "results.json")
    return EXIT_OK


def _print_summary(summary: str, results: Path) -> None:
    """Print a run's summary and where its results.json is; under torchrun, on rank 0 alone (the one that wrote it)."""
    from contrastlab.distributed import rank

    if rank() == 0:
        print(summary)
        print(f"results: {results}")


def _train_on_ray(args: argparse.Namespace, cfg: Any, out: Path) -> int:
    """``train --engine ray``: the job on a Ray Train worker group that restarts from the last checkpoint."""
    from contrastlab.scale.cluster import Engine, EngineError, ray_session
    from contrastlab.scale.train import check_workers, train_on_ray

    if args.engine != "ray":
        raise UsageError("train: --workers and --max-failures need --engine ray")
    if args.workers is None:
        raise UsageError("train: --engine ray needs --workers N (the ranks of the Ray Train group, one CPU each)")
    if args.workers < 1:
        raise UsageError(f"train: --workers must be >= 1, got {args.workers}")
    max_failures = 3 if args.max_failures is None else args.max_failures
    if max_failures < -1:
        raise UsageError(f"train: --max-failures must be >= -1 (-1: no limit), got {max_failures}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError("train: --engine ray starts its own workers; run it without torchrun")
    try:
        engine = Engine(args.engine, args.address)
        with ray_session(engine.address, temp_dir=out):
            try:
                check_workers(args.workers)
            except ValueError as e:
                raise UsageError(f"train: --{e}") from None
            results = train_on_ray(cfg, out, workers=args.workers, max_failures=max_failures, resume=args.resume)
    except EngineError as e:
        raise UsageError(f"train: {e}") from None
    print(results["summary"])
    print(f"results: {out / 'results.json'}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- eval


def _cmd_eval(args: argparse.Namespace, rest: list[str]) -> int:
    from contrastlab.config import read_config
    from contrastlab.io import write_json_atomic
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.runner import build_encoder, build_source, check_job, make_eval_fn
    from contrastlab.train.loop.checkpoint import latest_checkpoint
    from contrastlab.train.loop.trainer import resolve_device

    if rest:
        raise UsageError(f"eval: unexpected arguments {' '.join(rest)}")
    run = Path(args.run_dir)
    if not (run / "config.json").is_file():
        raise UsageError(f"eval: {run} is not a training run folder (no config.json; made by `contrastlab train`)")
    cfg = read_config(JobConfig, run / "config.json", verified=True)  # checksum verified first
    state = latest_checkpoint(run)
    if state is None:
        raise UsageError(f"eval: {run} has no checkpoint.pt")
    source = build_source(cfg)
    check_job(cfg, source)
    model = build_encoder(cfg, source)
    model.load_state_dict(state["model"])
    model.to(resolve_device(cfg.train.device)).eval()
    import torch

    with torch.no_grad():
        metrics = make_eval_fn(cfg, source)(model, int(state["step"]))
    for k, v in metrics.items():
        print(f"{k:>12}  {v:.6g}")
    out = Path(args.out) if args.out else run / "eval.json"
    write_json_atomic(out, {"step": int(state["step"]), "metrics": metrics})
    print(f"written: {out}")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- export


def _cmd_export(args: argparse.Namespace, rest: list[str]) -> int:
    if rest:
        raise UsageError(f"export: unexpected arguments {' '.join(rest)}")
    if args.st is not None:
        from contrastlab.train.job.export import export_run

        if args.max_seq_length is not None or args.int8 is not None:
            raise UsageError("export: --max-seq-length and --int8 go with --onnx, not --st")
        try:
            folder = export_run(args.model, args.st)
        except ValueError as e:  # not a text run, no checkpoint, an occupied output folder: named in the message
            raise UsageError(f"export: {' '.join(str(e).split())}") from None
        print(f"written: {folder}  (SentenceTransformer({str(folder)!r}) loads it; contrastlab is not needed)")
        return EXIT_OK
    from contrastlab.export.onnx import export_model

    if args.max_seq_length is not None and args.max_seq_length < 1:
        raise UsageError(f"export: --max-seq-length must be >= 1, got {args.max_seq_length}")
    if args.int8 is not None and Path(args.int8).exists():
        raise UsageError(f"export: int8: {args.int8} already exists; give a new folder")
    try:
        out = export_model(args.model, args.onnx, max_seq_length=args.max_seq_length)
        print(f"written: {out / 'model.onnx'} (verified against PyTorch; load with contrastlab.export.load_onnx)")
        if args.int8 is not None:
            from contrastlab.export.quantize import quantize_int8

            print(f"written: {quantize_int8(out, args.int8) / 'model.onnx'} (int8 dynamic quantization)")
    except ValueError as e:  # bad input: the message names the argument (model, onnx) or the file
        raise UsageError(f"export: {' '.join(str(e).split())}") from None
    return EXIT_OK


# ----------------------------------------------------------------------------------------------- run


def _experiment_help(name: str) -> str:
    from contrastlab.experiments import get_experiment

    module = get_experiment(name)
    doc = (module.__doc__ or "").strip()
    return f"contrastlab run {name} [--quick] [--out DIR] [--FIELD VALUE ...]\n\n{doc}\n\n" + _fields_help(
        module.Config
    )


def _run_with_board(name: str, out_arg: str | None, quick: bool, overrides: dict[str, Any]) -> dict[str, Any]:
    """Run one experiment under a progress board (elapsed time, estimate from a recorded run) on stderr.

    An experiment with ``OWN_PROGRESS`` (the demo) shows its own board; under torchrun only rank 0 shows one.
    """
    from contrastlab.config import to_dict
    from contrastlab.distributed import rank
    from contrastlab.experiments import default_out_dir, get_experiment, resolve_config, run_experiment
    from contrastlab.experiments._durations import recorded_seconds
    from contrastlab.progress import Board, Task

    if getattr(get_experiment(name), "OWN_PROGRESS", False):
        return run_experiment(name, None, out_arg, quick=quick, overrides=overrides)
    cfg = resolve_config(name, quick=quick, overrides=overrides)  # a bad field fails before the board shows
    out = Path(out_arg) if out_arg else default_out_dir(name)
    estimate = recorded_seconds(name, to_dict(cfg), out, quick=quick, reference=quick and not overrides)
    board = Board(name, [Task(name, *estimate)], mode="auto" if rank() == 0 else "off")
    with board:
        board.start(name)
        try:
            results = run_experiment(name, cfg, out, quick=quick)
        except KeyboardInterrupt:
            board.end(name, "stopped", f"interrupted; what it wrote is in {out}")
            raise
        except BaseException as e:
            board.end(name, "failed", type(e).__name__)
            raise
        board.end(name, "done")
    return results


def _cmd_run(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    from contrastlab.config import parse_overrides
    from contrastlab.experiments import describe_experiments, list_experiments

    names = list_experiments()
    if args.list:
        if not names:
            print("no experiments are registered")
        for name, first in describe_experiments().items():
            print(f"{name:<24} {first}")
        return EXIT_OK
    if args.name is None:
        if args.help:
            parser.print_help()
            return EXIT_OK
        raise UsageError("run: give an experiment NAME or --list (see contrastlab run --help)")
    if args.name.replace("_", "-") not in names:
        raise UsageError(f"run: unknown experiment {args.name!r}; known: {', '.join(names) or '(none)'}")
    if args.help:
        print(_experiment_help(args.name))
        return EXIT_OK
    overrides = parse_overrides(rest)
    try:
        results = _run_with_board(args.name, args.out, args.quick, overrides)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    _print_summary(results.get("summary", ""), Path(results["out_dir"]) / "results.json")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- report


def _cmd_report(args: argparse.Namespace, rest: list[str]) -> int:
    from contrastlab.report import write_report

    if rest:
        raise UsageError(f"report: unexpected arguments {' '.join(rest)}")
    for d in args.run_dirs:
        p = Path(d)
        if not (p / "results.json").is_file() and not (p / "metrics.jsonl").is_file():
            raise UsageError(f"report: {p} holds neither results.json nor metrics.jsonl")
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) if len(args.run_dirs) == 1 else Path("report")
    md, html = write_report(args.run_dirs, out)
    print(f"written: {md}\nwritten: {html}")
    return EXIT_OK


# --------------------------------------------------------------------------------------------- audit


def _markdown_table(table: dict[str, Any]) -> str:
    """A results table as markdown, every cell whole (floats to four decimals, as on a terminal)."""

    def cell(v: Any) -> str:
        return (f"{v:.4f}" if isinstance(v, float) else str(v)).replace("|", "\\|").replace("\n", " ")

    lines = [f"**{table['title']}**", "", "| " + " | ".join(cell(c) for c in table["columns"]) + " |"]
    lines.append("|" + "|".join("---" for _ in table["columns"]) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


def _print_results(results: dict[str, Any], out: Path) -> int:
    """Print a results folder's tables and summary, then where its files are; the exit code of success.

    On a terminal the tables are drawn to its width; elsewhere (a log, a pipe) they are printed as markdown
    tables and the summary as one line, so that no cell is cut.
    """
    from rich.console import Console

    from contrastlab.experiments.demo import _print_table

    console = Console()
    if console.is_terminal:
        for table in results["tables"]:
            _print_table(console, table)
        console.print(results["summary"], markup=False)
    else:
        for table in results["tables"]:
            print(_markdown_table(table))
        print(results["summary"])
    print(f"results: {out / 'results.json'}\nreport: {out / 'report.html'}")
    return EXIT_OK


def _refuse_tasks_with_spaces(argv: Sequence[str], extra: Sequence[str]) -> None:
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


def _cmd_audit(args: argparse.Namespace, rest: list[str]) -> int:
    from contrastlab.audit import QUICK, AuditConfig
    from contrastlab.audit.run import audit
    from contrastlab.config import apply_overrides, parse_overrides
    from contrastlab.experiments import default_out_dir

    overrides: dict[str, Any] = dict(parse_overrides(rest))
    if args.model is not None:
        overrides["model"] = args.model
    if args.pairs is not None:
        overrides["pairs"] = args.pairs
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
    several = args.all_tasks or len(tasks) > 1
    if len(tasks) == 1 and not several:
        overrides["task"] = tasks[0]
    if args.split is not None:  # the task's qrels split; without a task, the code corpus's split
        overrides["task_split" if tasks else "split"] = args.split
    if args.quiet:
        overrides["progress"] = False
    if args.compress:
        overrides["compress"] = True
    cfg = apply_overrides(QUICK if args.quick else AuditConfig(), overrides)
    out = Path(args.out) if args.out else default_out_dir("audit")
    try:
        if several:
            from contrastlab.audit.task_suite import audit_tasks

            results = audit_tasks(cfg, tasks, out, engine=args.engine, address=args.address, shards=args.shards)
        else:
            results = audit(cfg, out, engine=args.engine, address=args.address, shards=args.shards)
    except ValueError as e:  # bad input: the message names the argument, file and line
        message = " ".join(str(e).split())
        if message.startswith("tasks: "):  # the library's list of tasks is the command line's --task
            message = "--task: " + message.removeprefix("tasks: ")
        raise UsageError(f"audit: {message}") from None
    return _print_results(results, out)


# ------------------------------------------------------------------------------------------- compare


def _cmd_compare(args: argparse.Namespace, rest: list[str]) -> int:
    from contrastlab.audit.compare import CompareConfig, compare
    from contrastlab.config import apply_overrides, parse_overrides
    from contrastlab.experiments import default_out_dir

    try:
        cfg = apply_overrides(CompareConfig(), dict(parse_overrides(rest)))
        out = Path(args.out) if args.out else default_out_dir("compare")
        results = compare(args.models, out, cfg)
    except ValueError as e:  # bad input: the message names the argument or file
        raise UsageError(f"compare: {' '.join(str(e).split())}") from None
    return _print_results(results, out)


# -------------------------------------------------------------------------------------------- encode


def _cmd_encode(args: argparse.Namespace, rest: list[str]) -> int:
    from contrastlab.audit.text_model import TextModelSource
    from contrastlab.scale.cluster import Engine
    from contrastlab.scale.corpus import TextCorpus
    from contrastlab.scale.encode import default_task_rows, encode_corpus
    from contrastlab.search.index import _progress
    from contrastlab.search.store import StoreError

    if rest:
        raise UsageError(f"encode: unexpected arguments {' '.join(rest)}")
    for flag, value in (
        ("--shard-rows", args.shard_rows),
        ("--batch-size", args.batch_size),
        ("--actors", args.actors),
    ):
        if value < 1:
            raise UsageError(f"encode: {flag} must be at least 1, got {value}")
    if args.max_seq_length < 0:
        raise UsageError(f"encode: --max-seq-length must be at least 0 (0: the model's own), got {args.max_seq_length}")
    try:
        engine = Engine(args.engine, args.address)
        corpus = TextCorpus.scan(
            args.corpus, stride=default_task_rows(args.shard_rows, args.batch_size)
        )  # fails before the model loads
    except ValueError as e:
        flag = "" if str(e).startswith(("--address", "engine")) else "--corpus "
        raise UsageError(f"encode: {flag}{' '.join(str(e).split())}") from None
    bar = _progress(not args.quiet, "encoding shards", -(-corpus.count // args.shard_rows))
    try:
        result = encode_corpus(
            corpus,
            TextModelSource(
                args.model, max_seq_length=args.max_seq_length, prompt=args.prompt, prompt_name=args.prompt_name
            ),
            args.out,
            engine=engine,
            shard_rows=args.shard_rows,
            batch_size=args.batch_size,
            actors=args.actors,
            on_shard=lambda i, rec: bar.advance(1),
        )
    except StoreError as e:
        raise UsageError(f"encode: --out {' '.join(str(e).split())}") from None
    except ValueError as e:  # the model, the engine: the message names the argument
        raise UsageError(f"encode: {' '.join(str(e).split())}") from None
    finally:
        bar.close()
    store = result.store
    print(
        f"{store.count} documents, {len(store.shards)} shards of {store.dim}-dimensional {store.dtype} embeddings "
        f"({len(result.written)} encoded, {len(result.skipped)} kept from an interrupted run) in "
        f"{result.total_s:.1f} s on {result.engine}"
    )
    if store.model.get("prompt"):
        print(f"prompt: {store.model['prompt']!r} before every text")
    print(f"store: {store.path}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- mine


def _cmd_mine(args: argparse.Namespace, rest: list[str]) -> int:
    from contrastlab.config import apply_overrides, parse_overrides
    from contrastlab.mine import MineConfig, mine_pairs
    from contrastlab.scale.cluster import Engine

    overrides: dict[str, Any] = dict(parse_overrides(rest))
    for name in ("model", "pairs"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.quiet:
        overrides["progress"] = False
    cfg = apply_overrides(MineConfig(), overrides)
    try:
        engine = Engine(args.engine, args.address)
        summary = mine_pairs(cfg, args.out, engine=engine, shards=args.shards)
    except ValueError as e:  # bad input: the message names the argument
        raise UsageError(f"mine: {' '.join(str(e).split())}") from None
    cap = (
        ""
        if cfg.max_probability is None
        else f"; max_probability {cfg.max_probability:g} at temperature {cfg.temperature:g}"
    )
    print(
        f"{summary['complete']} of {summary['anchors']} anchors kept {cfg.num_negatives} negatives; "
        f"{summary['rows']} rows written ({cfg.output_format}){cap}"
    )
    print(f"written: {summary['out']}\noptions: {summary['sidecar']}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- data

DATA_FILES: dict[str, dict[str, Any]] = {}
"""Extra datasets for ``contrastlab data``: name → ``{"files": [paths under root], "source": str}``.

Datasets registered in ``contrastlab.data.registry.DATASETS`` are listed as well.
"""


def _dataset_table(root: Path) -> list[tuple[str, str, list[str], bool | None]]:
    rows: list[tuple[str, str, list[str], bool | None]] = []
    try:
        registry = importlib.import_module("contrastlab.data.registry")
    except ImportError:
        registry = None
    if registry is not None:
        for name, spec in getattr(registry, "DATASETS", {}).items():
            files = sorted({f for fs in getattr(spec, "files", {}).values() for f in fs})
            available = getattr(registry, "dataset_available", None)
            present: bool | None = None
            if available is not None:
                present = all(available(name, root, s) for s in ("train", "test") if s in spec.splits)
            rows.append((name, str(getattr(spec, "source", "")), files, present))
    for name, info in DATA_FILES.items():
        files = list(info.get("files", []))
        rows.append((name, str(info.get("source", "")), files, all((root / f).exists() for f in files)))
    return rows


def _task_table(root: Path) -> list[tuple[Path, list[str]]]:
    """BEIR-layout tasks at ``root`` or one or two folders below it, with their qrels splits."""
    from contrastlab.tasks import beir_splits, tasks_under

    return [(p, beir_splits(p)) for p in tasks_under(root)]


def _cmd_data_get(args: argparse.Namespace, root: Path) -> int:
    from contrastlab.data.download import ByteBar, DownloadError, fetch, lookup, url_download, with_mirror

    if args.target is None:
        raise UsageError("data get: name: which dataset? (contrastlab data get NAME; contrastlab data lists them)")
    try:
        if "://" in args.target:
            if args.mirror:
                raise DownloadError("--mirror: applies to a named dataset, not to a URL")
            spec = url_download(args.target, args.sha256, args.as_name)
        else:
            for flag, value in (("--sha256", args.sha256), ("--name", args.as_name)):
                if value is not None:
                    raise DownloadError(f"{flag}: applies to a URL, not to the named dataset {args.target!r}")
            spec = lookup(args.target)
            spec = with_mirror(spec, args.mirror) if args.mirror else spec
        bar = ByteBar("off" if args.quiet else "auto")
        try:
            done = fetch(spec, root, on_progress=bar)
        finally:
            bar.close()
    except DownloadError as e:
        raise UsageError(f"data get: {' '.join(str(e).split())}") from None
    if done.skipped:
        print(f"{spec.name}: a verified copy is already in {done.path}; nothing downloaded")
    else:
        print(f"{spec.name}: {done.bytes / 1e6:.1f} MB downloaded, checksum verified, installed in {done.path}")
    if spec.kind == "task":
        one = (done.path / "qrels").is_dir()
        task = (
            spec.name if one else f"{spec.name}/{next((p.name for p in sorted(done.path.iterdir()) if p.is_dir()), '')}"
        )
        print(f"use it: contrastlab audit MODEL --task {task}  (licence: {spec.licence})")
    return EXIT_OK


def _cmd_data(args: argparse.Namespace, rest: list[str]) -> int:
    if rest:
        raise UsageError(f"data: unexpected arguments {' '.join(rest)}")
    root = Path(args.root) if args.root else Path(os.environ.get("CONTRASTLAB_DATA", "data"))
    if args.name == "get":
        return _cmd_data_get(args, root)
    if args.target is not None or any(v is not None for v in (args.mirror, args.sha256, args.as_name)):
        raise UsageError("data: NAME takes no further argument or --mirror/--sha256/--name (those are for data get)")
    rows = _dataset_table(root)
    print(f"data root: {root.resolve()}  (set with --root or $CONTRASTLAB_DATA; `contrastlab data get NAME` downloads)")
    tasks = _task_table(root)
    if tasks and args.name is None:
        print("\nretrieval tasks (BEIR layout; contrastlab audit MODEL --task DIR --split SPLIT):")
        for path, splits in tasks:
            print(f"    {path}   splits: {', '.join(splits)}")
    known = {r[0] for r in rows}
    if args.name is not None and args.name not in known:
        raise UsageError(f"data: unknown dataset {args.name!r}; known: {', '.join(sorted(known)) or '(none)'}")
    if not rows:
        print("no file-backed datasets are registered (the synthetic worlds need no files)")
        return EXIT_OK
    names = [args.name] if args.name else [r[0] for r in rows]
    for name, source, files, present in rows:
        if name not in names:
            continue
        mark = {True: "present", False: "missing", None: "?"}[present]
        print(f"\n{name}: {mark}   (source: {source})")
        shown = files if args.name else files[:6]
        for f in shown:
            print(f"    {root / f}")
        if len(files) > len(shown):
            print(f"    ... {len(files) - len(shown)} more (contrastlab data {name})")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- query


def _cmd_query(args: argparse.Namespace, rest: list[str]) -> int:
    import numpy as np

    from contrastlab.io import write_json_atomic
    from contrastlab.scale.cluster import Engine
    from contrastlab.scale.sharded_search import query_store
    from contrastlab.search.cli import load_matrix

    if rest:
        raise UsageError(f"query: unexpected arguments {' '.join(rest)}")
    try:
        engine = Engine(args.engine, args.address)
        if args.out is not None and not args.out.endswith(".json"):
            raise ValueError(f"--out: {args.out} must end in .json")
        queries = np.asarray(load_matrix(args.queries, None, "--queries"))
        if queries.ndim != 2:
            raise ValueError(f"--queries: expected shape (Q, D), got {queries.shape} in {args.queries}")
        folder = Path(args.out).resolve().parent if args.out else Path.cwd()
        res, log_z = query_store(
            args.store,
            queries,
            args.k,
            engine=engine,
            temp_dir=folder,
            metric=args.metric,
            temperature=args.temperature,
            exclude_self=args.exclude_self,
            model=args.model,
        )
    except ValueError as e:  # bad input: the store's files, the model, the address, the queries
        msg = " ".join(str(e).split())
        if msg.startswith("queries:"):
            msg = f"--queries {args.queries}:{msg.removeprefix('queries:')}"
        raise UsageError(f"query: {msg}") from None
    out: dict[str, Any] = {"ids": res.ids, "scores": res.scores}
    if log_z is not None:
        out["log_partition"] = log_z
    # what was done to the queries: under cosine they were L2-normalised as the store's documents are
    out["metric"] = args.metric
    out["queries_normalised"] = args.metric == "cosine"
    out["temperature"] = args.temperature
    if args.out is None:
        for i in range(min(10, res.ids.shape[0])):
            lz = "" if log_z is None else f"  log Z = {log_z[i]:.6f}"
            print(f"{i}: {' '.join(map(str, res.ids[i]))}{lz}")
    else:
        write_json_atomic(args.out, out)
        print(f"wrote top-{args.k} of {res.ids.shape[0]} queries to {args.out}")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- search


def _cmd_search(argv: list[str]) -> int:
    try:
        module = importlib.import_module("contrastlab.search.cli")
    except ImportError:
        print("contrastlab search: the search module (contrastlab.search.cli) is not installed", file=sys.stderr)
        return EXIT_USAGE
    return int(module.main(argv))


# ---------------------------------------------------------------------------------------------- main


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    from contrastlab import __version__

    parser = _Parser(
        prog="contrastlab",
        description="Train contrastive embedding models and audit them as similarity-search engines.",
        epilog="exit codes: 0 ok, 1 runtime failure, 2 usage error, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"contrastlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subs: dict[str, argparse.ArgumentParser] = {}

    from contrastlab.train.job.config import JobConfig

    p = sub.add_parser(
        "train",
        help="train an encoder from a YAML/TOML config",
        description=(
            "Train from a config file: data.name, encoder.name, loss.name and views.augment are names in their "
            "registries (see configs/ for one example per dataset); any field can be overridden "
            "(--loss.temperature 0.2)."
        ),
        epilog=_fields_help(JobConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help="YAML, TOML or JSON file of JobConfig fields")
    p.add_argument("--out", help="output folder (default: the config's `out`, else runs/train-TIMESTAMP)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    from contrastlab.scale.cluster import add_engine_arguments

    add_engine_arguments(p)
    p.add_argument("--workers", type=int, metavar="N", help="--engine ray: ranks of the Ray Train group (one CPU each)")
    p.add_argument(
        "--max-failures",
        type=int,
        metavar="K",
        help="--engine ray: restarts of a failed group from the last checkpoint (default 3; -1: no limit)",
    )
    subs["train"] = p

    p = sub.add_parser("eval", help="evaluate a trained run on its held-out set", description="Re-evaluate a run.")
    p.add_argument("run_dir", help="a folder written by `contrastlab train`")
    p.add_argument("--out", help="where to write the metrics (default RUN_DIR/eval.json)")
    subs["eval"] = p

    p = sub.add_parser(
        "run",
        help="run a named experiment (--list to see them)",
        description="Run a registered experiment; `contrastlab run NAME --help` lists its config fields.",
        add_help=False,
    )
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--quick", action="store_true", help="the experiment's quick setting")
    p.add_argument("--out", help="output folder (default runs/NAME-TIMESTAMP)")
    p.add_argument("-h", "--help", action="store_true", help="show this help (with NAME: its config fields)")
    subs["run"] = p

    p = sub.add_parser(
        "report",
        help="write report.md and report.html from run folders",
        description="Render results.json and metrics.jsonl of one or more runs; several runs are compared.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", help="output folder (default: the run folder, or ./report for several)")
    subs["report"] = p

    from contrastlab.audit import AuditConfig

    p = sub.add_parser(
        "audit",
        help="audit any embedding model as a search engine (retrieval, softmax search, tails, norms)",
        description="Audit a model (default: the bundled all-MiniLM-L6-v2) on the docstring code corpus or a "
        "pairs file; writes results.json, figures and report.html. Any field can be overridden (--max_queries 500).",
        epilog=_fields_help(AuditConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    from contrastlab.scale.cluster import add_engine_arguments

    add_engine_arguments(p)
    p.add_argument(
        "--shards", type=int, default=None, help="document shards (default: 1 locally, one per Ray node with Ray)"
    )
    subs["audit"] = p

    from contrastlab.audit.compare import CompareConfig

    p = sub.add_parser(
        "compare",
        help="paired comparison of audits on the same task(s): differences, intervals, randomisation tests",
        description="Compare models query by query: each MODEL is an audit folder (contrastlab audit), or a folder "
        "of audit folders, one per task; the first is the baseline. Prints each metric's paired difference with a "
        "95%% bootstrap interval and a randomisation-test p-value, Holm-adjusted; refuses audits of different "
        "tasks, splits, query sets or corpora.",
        epilog=_fields_help(CompareConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="audit folders (or folders of per-task audits)")
    p.add_argument("--out", help="output folder (default runs/compare-TIMESTAMP)")
    subs["compare"] = p

    from contrastlab.scale.cluster import add_engine_arguments
    from contrastlab.scale.encode import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_ROWS

    p = sub.add_parser(
        "encode",
        help="encode a text corpus into an embedding store (one process or Ray)",
        description="Encode every document of a corpus with a text model into an embedding store: shards of "
        "row ids and embeddings with a checksummed manifest. Re-running an interrupted encode keeps the "
        "finished shards. Corpus: a UTF-8 FILE with one document per line, or a DIR whose *.txt files (sorted "
        "by name) are one document each; a document's id is its position.",
    )
    p.add_argument(
        "model", help="minilm, a sentence-transformers/Hugging Face folder or cached name, or a contrastlab text run"
    )
    p.add_argument("--corpus", required=True, metavar="FILE|DIR", help="the documents (see above)")
    p.add_argument("--out", required=True, metavar="STORE", help="the store folder (new, or an interrupted encode)")
    add_engine_arguments(p)
    p.add_argument("--shard-rows", type=int, default=DEFAULT_SHARD_ROWS, help="rows per shard")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="texts per forward pass")
    p.add_argument("--actors", type=int, default=2, help="Ray actors, each loading the model once (--engine ray)")
    p.add_argument(
        "--max-seq-length",
        type=int,
        default=0,
        help="tokens per text (longer ones are truncated; default 0: the model's own max_seq_length, as audit)",
    )
    p.add_argument(
        "--prompt",
        default=None,
        help='put before every text, e.g. "passage: " (default: the prompt the model records under --prompt-name: '
        "a contrastlab run or its model folder, a sentence-transformers folder; none if it records none)",
    )
    p.add_argument(
        "--prompt-name",
        choices=("document", "query"),
        default="document",
        help="which recorded prompt to use when --prompt is not given: document (a corpus, the default) or query "
        "(a file of queries; audit's query_prompt)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    subs["encode"] = p

    from contrastlab.mine import MineConfig

    p = sub.add_parser(
        "mine",
        help="mine hard negatives for a pairs file (writes a pairs file with negative columns)",
        description="Mine each anchor's hard negatives among the file's distinct positives, filtered as "
        "sentence-transformers' mine_hard_negatives filters them (range_min, range_max, max_score, min_score, "
        "margin, relative_margin, sampling), plus max_probability: a cap on the model's softmax-search "
        "probability of a candidate over the whole corpus. Writes anchor, positive, negative_1..K rows (n-tuple) "
        "or anchor, positive, negative rows (triplet) that `contrastlab train` (data.text.path) reads.",
        epilog=_fields_help(MineConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model",
        nargs="?",
        help="minilm, a sentence-transformers/Hugging Face folder or cached name, a contrastlab text run, or a .npy",
    )
    p.add_argument("--pairs", help="TSV/CSV/JSONL file or saved datasets folder of (anchor, positive) pairs")
    p.add_argument("--out", required=True, help="the output pairs file (.tsv, .csv or .jsonl)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    from contrastlab.scale.cluster import add_engine_arguments

    add_engine_arguments(p)
    p.add_argument(
        "--shards", type=int, default=None, help="document shards with --engine ray (default: one per Ray node)"
    )
    subs["mine"] = p

    p = sub.add_parser(
        "export",
        help="export a model to ONNX (--onnx) or a text run as a sentence-transformers folder (--st)",
        description="--onnx OUT: export a text model (minilm, a sentence-transformers/Hugging Face folder) or a "
        "contrastlab run's encoder (text, MLP, CNN, ResNet-18, ViT) to an ONNX folder: model.onnx (dynamic batch and "
        "sequence axes, pooling and normalisation inside), the tokenizer, and a checksummed onnx.json; the folder can "
        "be audited (contrastlab audit OUT). --st OUT: write the fine-tuned text encoder of a `contrastlab train` run "
        "as a sentence-transformers folder that SentenceTransformer(OUT) loads without contrastlab (text runs also "
        "save one in RUN/model).",
    )
    p.add_argument("model", help="minilm, a model folder, or a contrastlab run folder (--st: a text run)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--onnx", metavar="OUT", help="the ONNX export folder to write (must not exist)")
    target.add_argument("--st", metavar="OUT", help="the sentence-transformers folder to write (new or empty)")
    p.add_argument("--max-seq-length", type=int, help="--onnx: tokens per text at run time (default: the model's own)")
    p.add_argument("--int8", metavar="DIR", help="--onnx: also write an int8 dynamically quantized copy to DIR")
    subs["export"] = p

    p = sub.add_parser(
        "data",
        help="where dataset files go, which are present; `data get NAME` downloads one",
        description="List datasets and their files. `contrastlab data get NAME` downloads a BEIR task (scifact, "
        "nfcorpus, ...) or an image dataset (cifar10, cifar100, stl10, svhn) from its official address, checks the "
        "published checksum before unpacking, and installs it under the data root; rerunning finds the verified "
        "copy and does nothing, and an interrupted download resumes. `contrastlab data get URL --sha256 HEX --name "
        "NAME` fetches any task zip. Nothing is ever downloaded otherwise.",
    )
    p.add_argument("name", nargs="?", help="one dataset (all files listed), or `get`")
    p.add_argument("target", nargs="?", help="data get: the dataset name, or the URL of a task zip")
    p.add_argument("--root", help="data root (default $CONTRASTLAB_DATA or ./data)")
    p.add_argument("--mirror", metavar="URL", help="data get: the same files under another base address")
    p.add_argument("--sha256", metavar="HEX", help="data get URL: the SHA-256 the file must have")
    p.add_argument("--name", dest="as_name", metavar="NAME", help="data get URL: the folder to install it as")
    p.add_argument("--quiet", action="store_true", help="data get: no progress bar")
    subs["data"] = p

    p = sub.add_parser(
        "query",
        help="exact top-k (and log-partition) over an embedding store, in one process or on Ray",
        description="Search every shard of an embedding store exactly and merge (score descending, id ascending).",
    )
    p.add_argument("store", help="embedding store folder")
    p.add_argument("--queries", required=True, help="(Q, D) .npy or .safetensors of query embeddings")
    p.add_argument("-k", type=int, default=10, help="results per query")
    p.add_argument(
        "--metric",
        choices=("cosine", "ip"),
        default="cosine",
        help="cosine (default): the queries are L2-normalised as the store's documents are, so raw model outputs "
        "and unit vectors give the same results (results.json: queries_normalised); ip: used as given",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="also the corpus-wide log-partition at this τ (of the normalised queries under cosine)",
    )
    p.add_argument("--exclude-self", action="store_true", help="queries are the store's rows 0..Q-1")
    p.add_argument("--model", default=None, help="refuse a store written by a model of another name")
    p.add_argument(
        "--out",
        default=None,
        help="results.json (ids, scores, log_partition, metric, queries_normalised, temperature); default: print",
    )
    from contrastlab.scale.cluster import add_engine_arguments

    add_engine_arguments(p)
    subs["query"] = p

    sub.add_parser("search", help="similarity search with faiss (contrastlab search --help)", add_help=False)
    return parser, subs


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "search":
        return _cmd_search(argv[1:])
    from contrastlab.config import ConfigError
    from contrastlab.io import CorruptFileError
    from contrastlab.train.loop.checkpoint import CheckpointError, CheckpointWarning

    try:
        parser, subs = _build_parser()
        if argv and argv[0] in subs:
            kept, rest, trailing = _split_arguments(subs[argv[0]], argv[1:])
            args, extra = parser.parse_known_args([argv[0], *kept])
            if extra:
                if argv[0] == "audit":
                    _refuse_tasks_with_spaces(argv[1:], extra)
                _refuse_extra(subs[argv[0]].prog, extra, trailing)
            if argv[0] in ("audit", "mine"):  # an optional MODEL may stand right after an override's value
                from contrastlab.audit import AuditConfig
                from contrastlab.mine import MineConfig

                config = AuditConfig if argv[0] == "audit" else MineConfig
                _refuse_a_number_taken_for_the_model(subs[argv[0]].prog, config, args.model, trailing)
        else:
            args, rest = parser.parse_known_args(argv)
        if args.command is None:
            if rest:
                raise UsageError(f"contrastlab: unknown command {rest[0]!r} (see contrastlab --help)")
            parser.print_help()
            return EXIT_USAGE
        if args.command in ("train", "run"):
            # under torchrun (WORLD_SIZE > 1): join the process group, gloo on CPU / NCCL on GPU
            from contrastlab.distributed import init_from_env

            init_from_env(timeout_s=float(os.environ.get("CONTRASTLAB_DIST_TIMEOUT", "600")))
        if args.command == "run":
            return _cmd_run(args, rest, subs["run"])
        handler = {
            "train": _cmd_train,
            "eval": _cmd_eval,
            "export": _cmd_export,
            "report": _cmd_report,
            "data": _cmd_data,
            "audit": _cmd_audit,
            "compare": _cmd_compare,
            "encode": _cmd_encode,
            "mine": _cmd_mine,
            "query": _cmd_query,
        }
        with warnings.catch_warnings():  # restores showwarning on exit
            default_show = warnings.showwarning

            def show(message: Any, category: type[Warning], *rest_: Any, **kw: Any) -> None:
                if issubclass(category, CheckpointWarning):  # a checkpoint fallback: one line, like an error
                    print(f"contrastlab: warning: {' '.join(str(message).split())}", file=sys.stderr)
                else:
                    default_show(message, category, *rest_, **kw)

            warnings.showwarning = show
            return handler[args.command](args, rest)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    except (ConfigError, CheckpointError, CorruptFileError, FileNotFoundError) as e:
        # a bad config, an unusable checkpoint, a file that fails its checksum, a data set that is
        # not where the user said it is
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"contrastlab: {textwrap.shorten(msg, 800)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        if os.environ.get("CONTRASTLAB_DEBUG"):
            raise
        msg = textwrap.shorten(str(e), 400) or type(e).__name__
        print(
            f"contrastlab: failed: {type(e).__name__}: {msg} (CONTRASTLAB_DEBUG=1 for the traceback)", file=sys.stderr
        )
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
