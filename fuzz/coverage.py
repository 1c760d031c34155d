"""Line coverage of the reader modules by a family's corpus (the seeds plus what the fuzzer added).

Usage::

    python fuzz/coverage.py cifar            # replays fuzz/corpus/cifar/*, prints covered/total lines
    python fuzz/coverage.py --all --json     # every family with a corpus, one JSON object per family

The corpus is replayed through the contract check (``fuzz/targets.py``) under ``sys.settrace``; a line
counts when it executes for at least one input. The denominator is every line that holds code in the
family's reader modules (all their functions, including ones the family does not call, so the figure is
a lower bound on how much of the reading path is exercised).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

READER_MODULES: dict[str, tuple[str, ...]] = {
    "config": ("contrastlab.config",),
    "checkpoint": ("contrastlab.train.loop.checkpoint",),
    "index": ("contrastlab.search.index", "contrastlab.npyfile"),
    "npy": ("contrastlab.npyfile", "contrastlab.cli._options"),
    "cifar": ("contrastlab.data.cifar",),
    "stl10": ("contrastlab.data.stl10",),
    "svhn": ("contrastlab.data.svhn", "contrastlab.data.mat5"),
    "imagenet32": ("contrastlab.data.imagenet32", "contrastlab.npyfile"),
    "tiny_imagenet": ("contrastlab.data.tiny_imagenet",),
    "cifar10h": ("contrastlab.data.cifar10h", "contrastlab.npyfile"),
    "pairs": ("contrastlab.train.job.feature_pairs", "contrastlab.search.mining", "contrastlab.npyfile"),
}
"""The modules whose lines count for each family."""


def _code_lines(code: types.CodeType) -> set[int]:
    lines = {line for _, _, line in code.co_lines() if line is not None and line != code.co_firstlineno}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            lines |= _code_lines(const)
    return lines


def _function_lines(module: types.ModuleType) -> set[int]:
    """Lines inside the module's function bodies (module-level statements run on import and are left out)."""
    path = Path(module.__file__ or "")
    top = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    lines: set[int] = set()
    for const in top.co_consts:
        if isinstance(const, types.CodeType):
            lines |= _code_lines(const)
    return lines


def measure(family: str, corpus: Path) -> dict[str, object]:
    """Replay ``corpus`` for ``family`` and return covered/total function-body lines per reader module."""
    from fuzz.targets import FAMILIES, ContractViolation, check

    modules = [importlib.import_module(m) for m in READER_MODULES[family]]
    files = {str(Path(m.__file__ or "").resolve()): m.__name__ for m in modules}
    hit: dict[str, set[int]] = {name: set() for name in files.values()}

    def tracer(frame: types.FrameType, event: str, arg: object) -> object:
        name = files.get(frame.f_code.co_filename)
        if name is None:
            return None
        if event == "line":
            hit[name].add(frame.f_lineno)
        return tracer

    inputs = sorted(p for p in corpus.iterdir() if p.is_file())
    violations = 0
    with tempfile.TemporaryDirectory() as tmp:
        for p in inputs:
            sys.settrace(tracer)
            try:
                check(FAMILIES[family], p.read_bytes(), Path(tmp), seconds=0)
            except ContractViolation:
                violations += 1
            finally:
                sys.settrace(None)
    per_module = {}
    covered = total = 0
    for m in modules:
        lines = _function_lines(m)
        got = len(hit[m.__name__] & lines)
        per_module[m.__name__] = f"{got}/{len(lines)}"
        covered, total = covered + got, total + len(lines)
    return {
        "family": family,
        "inputs": len(inputs),
        "violations": violations,
        "lines_covered": covered,
        "lines_total": total,
        "percent": round(100 * covered / total, 1) if total else 0.0,
        "modules": per_module,
    }


def main() -> int:
    """Print the coverage of one family's corpus, or of every family's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", nargs="?", choices=sorted(READER_MODULES))
    parser.add_argument("--all", action="store_true", help="every family that has a corpus")
    parser.add_argument("--corpus-root", default=str(HERE / "corpus"))
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    families = sorted(READER_MODULES) if args.all else [args.family] if args.family else []
    if not families:
        parser.error("give a family or --all")
    for family in families:
        corpus = Path(args.corpus_root) / family
        if not corpus.is_dir():
            continue
        result = measure(family, corpus)
        if args.json:
            print(json.dumps(result))
        else:
            print(
                f"{family}: {result['lines_covered']}/{result['lines_total']} lines ({result['percent']}%) "
                f"from {result['inputs']} inputs, {result['violations']} violations; {result['modules']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
