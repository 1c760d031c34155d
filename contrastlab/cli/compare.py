"""``contrastlab compare MODEL ...``: paired comparison of audits on the same tasks, query by query."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contrastlab.cli._options import UsageError, add_command, one_line
from contrastlab.cli._runs import print_results

OVERRIDES = True


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab compare``."""
    from contrastlab.audit.compare import CompareConfig

    p = add_command(
        sub,
        "compare",
        CompareConfig,
        help="paired comparison of audits on the same task(s): differences, intervals, randomisation tests",
        description="Compare models query by query: each MODEL is an audit folder (contrastlab audit), or a folder "
        "of audit folders, one per task; the first is the baseline. Prints each metric's paired difference with a "
        "95%% bootstrap interval and a randomisation-test p-value, Holm-adjusted; refuses audits of different "
        "tasks, splits, query sets or corpora.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="audit folders (or folders of per-task audits)")
    p.add_argument("--out", help="output folder (default runs/compare-TIMESTAMP)")
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Compare the audits ``args.models`` (the first the baseline) and print the results' tables."""
    from contrastlab.audit.compare import CompareConfig, compare
    from contrastlab.config import apply_overrides, parse_overrides
    from contrastlab.experiments import default_out_dir

    try:
        cfg = apply_overrides(CompareConfig(), dict(parse_overrides(rest)))
        out = Path(args.out) if args.out else default_out_dir("compare")
        results = compare(args.models, out, cfg)
    except ValueError as e:  # bad input: the message names the argument or file
        raise UsageError(f"compare: {one_line(e)}") from None
    return print_results(results, out)
