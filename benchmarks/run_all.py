"""Run every benchmark script in this folder (``make bench``), each in its own process, and show its tables.

Every ``benchmarks/*.py`` except this file and private helpers (names starting with ``_``) is a
benchmark; scripts added later are picked up without editing this file. Each runs as a subprocess
with the same Python, its output streamed as it comes; a failing script is reported and the others
still run. The exit status is non-zero if any script failed.

Usage:
    python benchmarks/run_all.py                 # all of them
    python benchmarks/run_all.py loss_speed      # only those whose name contains a given word
    python benchmarks/run_all.py --list
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> list[Path]:
    """The benchmark scripts, sorted by name."""
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name != Path(__file__).name)


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks; return 1 if any failed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="run only scripts whose file name contains one of these")
    ap.add_argument("--list", action="store_true", help="list the scripts and exit")
    args = ap.parse_args(argv)
    scripts = [s for s in discover() if not args.names or any(w in s.stem for w in args.names)]
    if args.list:
        print("\n".join(s.name for s in scripts))
        return 0
    failed = []
    for script in scripts:
        print(f"\n## {script.name}\n", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"\n({script.name}: exit {rc}, {time.perf_counter() - t0:.0f} s)", flush=True)
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
