"""``contrastlab train CONFIG``: train an encoder from a config file, here, under torchrun, or on Ray Train."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_INTERRUPTED, UsageError, add_command
from contrastlab.cli._runs import join_process_group, print_summary

OVERRIDES = True


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab train``."""
    from contrastlab.scale.cluster import add_engine_arguments
    from contrastlab.train.job.config import JobConfig

    p = add_command(
        sub,
        "train",
        JobConfig,
        help="train an encoder from a YAML/TOML config",
        description=(
            "Train from a config file: data.name, encoder.name, loss.name and views.augment are names in their "
            "registries (see configs/ for one example per dataset); any field can be overridden "
            "(--loss.temperature 0.2)."
        ),
    )
    p.add_argument("config", help="YAML, TOML or JSON file of JobConfig fields")
    p.add_argument("--out", help="output folder (default: the config's `out`, else runs/train-TIMESTAMP)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_arguments(p)
    p.add_argument("--workers", type=int, metavar="N", help="--engine ray: ranks of the Ray Train group (one CPU each)")
    p.add_argument(
        "--max-failures",
        type=int,
        metavar="K",
        help="--engine ray: restarts of a failed group from the last checkpoint (default 3; -1: no limit)",
    )
    return p


def load_job(path: str, overrides: Sequence[str]) -> Any:
    """The :class:`~contrastlab.train.job.config.JobConfig` of a config file with ``--FIELD VALUE`` overrides."""
    from contrastlab.config import apply_overrides, parse_overrides, read_config
    from contrastlab.train.job.config import JobConfig

    cfg = read_config(JobConfig, path)  # a config.json contrastlab wrote (a previous run's) is verified
    return apply_overrides(cfg, parse_overrides(overrides)) if overrides else cfg


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Train the job of ``args.config`` with the overrides ``rest``; Ctrl-C exits 130 once the checkpoint is saved."""
    from dataclasses import replace

    from contrastlab.experiments import default_out_dir
    from contrastlab.train.job.runner import run_job

    join_process_group()
    cfg = load_job(args.config, rest)
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
    return print_summary(results["summary"], out / "results.json")


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
    return print_summary(results["summary"], out / "results.json")
