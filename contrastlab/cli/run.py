"""``contrastlab run NAME``: run a registered experiment under a progress board; ``--list`` names them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_INTERRUPTED, EXIT_OK, UsageError, add_command, fields_help
from contrastlab.cli._runs import join_process_group, print_summary

OVERRIDES = True


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab run`` (its ``--help`` is its own: with NAME, the experiment's config fields)."""
    p = add_command(
        sub,
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
    p.set_defaults(print_help=p.print_help)
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """List the experiments, show one's help, or run ``args.name`` with the overrides ``rest``."""
    from contrastlab.config import parse_overrides
    from contrastlab.experiments import describe_experiments, list_experiments

    join_process_group()
    names = list_experiments()
    if args.list:
        if not names:
            print("no experiments are registered")
        for name, first in describe_experiments().items():
            print(f"{name:<24} {first}")
        return EXIT_OK
    if args.name is None:
        if args.help:
            args.print_help()
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
    return print_summary(results.get("summary", ""), Path(results["out_dir"]) / "results.json")


def _experiment_help(name: str) -> str:
    from contrastlab.experiments import get_experiment

    module = get_experiment(name)
    doc = (module.__doc__ or "").strip()
    return f"contrastlab run {name} [--quick] [--out DIR] [--FIELD VALUE ...]\n\n{doc}\n\n" + fields_help(module.Config)


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
