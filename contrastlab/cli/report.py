"""``contrastlab report RUN_DIR ...``: report.md and report.html from run folders."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab report``."""
    p = add_command(
        sub,
        "report",
        help="write report.md and report.html from run folders",
        description="Render results.json and metrics.jsonl of one or more runs; several runs are compared.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", help="output folder (default: the run folder, or ./report for several)")
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Write the report of ``args.run_dirs`` to ``args.out``."""
    from contrastlab.report import write_report

    for d in args.run_dirs:
        p = Path(d)
        if not (p / "results.json").is_file() and not (p / "metrics.jsonl").is_file():
            raise UsageError(f"report: {p} holds neither results.json nor metrics.jsonl")
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) if len(args.run_dirs) == 1 else Path("report")
    md, html = write_report(args.run_dirs, out)
    print(f"written: {md}\nwritten: {html}")
    return EXIT_OK
