"""The ``contrastlab`` command: ``train | eval | export | run | report | audit | compare | encode | query | mine | data | search``.

Exit codes scripts can rely on: 0 success, 1 runtime failure, 2 usage error (bad argument, unknown field, missing file
or data set, unusable checkpoint), 130 interrupted by Ctrl-C (after the checkpoint is written). A user mistake prints
one line, never a traceback; set ``CONTRASTLAB_DEBUG=1`` to see tracebacks of failures.

A command is a module: ``add_parser(subparsers)``, ``run(args, rest)`` (``rest``: ``--FIELD VALUE`` overrides, where
``OVERRIDES``), maybe ``refuse_extra(argv, extra)`` and ``model_config()``; ``search`` reads its own line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from contrastlab import __version__
from contrastlab.cli._options import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Parser,
    UsageError,
    checkpoint_warnings_on_one_line,
    error_report,
    refuse_a_number_taken_for_the_model,
    refuse_extra,
    split_arguments,
)

__all__ = ["main", "UsageError", "build_parser"]

COMMANDS = ("train", "eval", "run", "report", "audit", "compare", "encode", "mine", "export", "data", "query")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``contrastlab`` parser, and each command's own by name (``search`` aside: it parses its own line)."""
    parser = Parser(
        prog="contrastlab",
        description="Train contrastive embedding models and audit them as similarity-search engines.",
        epilog="exit codes: 0 ok, 1 runtime failure, 2 usage error, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"contrastlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    subs = {name: importlib.import_module(f"contrastlab.cli.{name}").add_parser(sub) for name in COMMANDS}
    sub.add_parser("search", help="similarity search with faiss (contrastlab search --help)", add_help=False)
    return parser, subs


def _run(argv: list[str]) -> int:
    parser, subs = build_parser()
    if argv and argv[0] in subs:
        prog, command = subs[argv[0]].prog, importlib.import_module(f"contrastlab.cli.{argv[0]}")
        kept, rest, trailing = split_arguments(subs[argv[0]], argv[1:])
        args, extra = parser.parse_known_args([argv[0], *kept])
        if extra:
            if hasattr(command, "refuse_extra"):  # in the command's own words
                command.refuse_extra(argv[1:], extra)
            refuse_extra(prog, extra, trailing)
        if hasattr(command, "model_config"):  # an optional MODEL may stand right after an override's value
            refuse_a_number_taken_for_the_model(prog, command.model_config(), args.model, trailing)
    else:
        args, rest = parser.parse_known_args(argv)  # --help, --version, no command, or one after an option
        if args.command is None:
            if rest:
                raise UsageError(f"contrastlab: unknown command {rest[0]!r} (see contrastlab --help)")
            parser.print_help()
            return EXIT_USAGE
        command = importlib.import_module(f"contrastlab.cli.{args.command}")
    if rest and not getattr(command, "OVERRIDES", False):
        raise UsageError(f"{args.command}: unexpected arguments {' '.join(rest)}")
    with checkpoint_warnings_on_one_line():
        return int(command.run(args, rest))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "search":  # it reads its own line
        try:
            search = importlib.import_module("contrastlab.cli.search")
        except ImportError:  # faiss, which it needs, is missing
            print("contrastlab search: the search module (contrastlab.cli.search) is not installed", file=sys.stderr)
            return EXIT_USAGE
        return int(search.main(argv[1:]))
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        code, line = error_report(e)
        if code == EXIT_FAILURE and os.environ.get("CONTRASTLAB_DEBUG"):
            raise
        print(line, file=sys.stderr)
        return code
