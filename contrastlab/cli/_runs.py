"""What the commands that write a results folder share: torchrun's process group, and printing what they wrote."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_OK


def join_process_group() -> None:
    """Under torchrun (``WORLD_SIZE > 1``), join the process group: gloo on CPU, NCCL on GPU; else nothing."""
    from contrastlab.distributed import init_from_env

    init_from_env(timeout_s=float(os.environ.get("CONTRASTLAB_DIST_TIMEOUT", "600")))


def print_summary(summary: str, results: Path) -> int:
    """Print a run's summary and where its results.json is; under torchrun, on rank 0 alone (the one that wrote it).

    Returns:
        The exit code of success.
    """
    from contrastlab.distributed import rank

    if rank() == 0:
        print(summary)
        print(f"results: {results}")
    return EXIT_OK


def _markdown_table(table: dict[str, Any]) -> str:
    """A results table as markdown, every cell whole (floats to four decimals, as on a terminal)."""

    def cell(v: Any) -> str:
        return (f"{v:.4f}" if isinstance(v, float) else str(v)).replace("|", "\\|").replace("\n", " ")

    lines = [f"**{table['title']}**", "", "| " + " | ".join(cell(c) for c in table["columns"]) + " |"]
    lines.append("|" + "|".join("---" for _ in table["columns"]) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


def print_results(results: dict[str, Any], out: Path) -> int:
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
