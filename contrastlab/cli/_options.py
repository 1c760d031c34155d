"""What the commands share: their options' parsing and their one-line error reports.

A line split into options and ``--FIELD VALUE`` overrides, the refusal of a list written with spaces, config fields
in a command's help, array files named by an option, and the one line (exit 2 or 1) that reports an error.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import textwrap
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import numpy as np

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A mistake in the command line or its inputs; reported as one line with exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line (exit 2) instead of usage + message.

    Abbreviations are off, so an override such as ``--res`` is never taken for ``--resume``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def one_line(e: BaseException) -> str:
    """An exception's message on one line: every run of whitespace (newlines included) one space."""
    return " ".join(str(e).split())


def error_report(e: Exception) -> tuple[int, str]:
    """The exit code of an error and the one line that reports it.

    Exit code 2: a mistake in the command line or its inputs (a :class:`UsageError`, a bad config, an unusable
    checkpoint, a file that fails its checksum, a data set not where the user said it is); 1: a failure while running.
    """
    from contrastlab.config import ConfigError
    from contrastlab.io import CorruptFileError
    from contrastlab.train.loop.checkpoint import CheckpointError

    if isinstance(e, UsageError):
        return EXIT_USAGE, str(e)
    if isinstance(e, (ConfigError, CheckpointError, CorruptFileError, FileNotFoundError)):
        return EXIT_USAGE, f"contrastlab: {textwrap.shorten(one_line(e) or type(e).__name__, 800)}"
    msg = textwrap.shorten(str(e), 400) or type(e).__name__
    return EXIT_FAILURE, f"contrastlab: failed: {type(e).__name__}: {msg} (CONTRASTLAB_DEBUG=1 for the traceback)"


@contextlib.contextmanager
def checkpoint_warnings_on_one_line() -> Iterator[None]:
    """Show a checkpoint fallback within as one line, like an error; any other warning as Python shows it.

    A fallback is a :class:`~contrastlab.train.loop.checkpoint.CheckpointWarning`; ``showwarning`` is restored on exit.
    """
    from contrastlab.train.loop.checkpoint import CheckpointWarning

    with warnings.catch_warnings():
        default_show = warnings.showwarning

        def show(message: Any, category: type[Warning], *rest: Any, **kw: Any) -> None:
            if issubclass(category, CheckpointWarning):
                print(f"contrastlab: warning: {one_line(message)}", file=sys.stderr)
            else:
                default_show(message, category, *rest, **kw)

        warnings.showwarning = show
        yield


def split_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Split a command's arguments into its own (options and positionals) and ``--FIELD VALUE`` overrides.

    An option the command's parser knows keeps its value (``--out DIR``, ``--quick``); any other
    ``--name`` takes the next argument as its value (``--name=value`` the same), so an override's value
    is never mistaken for an optional positional argument, wherever the positionals are.

    Returns:
        The command's own arguments, the overrides, and a map from each override ``--name`` followed by bare
        arguments to its value then those arguments (before the next option): ``--generators linear monomial``
        gives ``{"--generators": ["linear", "monomial"]}``.

    Raises:
        UsageError: an override without a value (the end of the line, or another ``--option`` next).
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


def refuse_extra(prog: str, extra: Sequence[str], trailing: dict[str, list[str]]) -> NoReturn:
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


def refuse_a_number_taken_for_the_model(
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
        refuse_extra(prog, [model], {flag: values})


def add_command(sub: Any, name: str, config: type | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """Command ``name``'s parser; with ``config``, its help ends with the fields that ``--FIELD VALUE`` sets."""
    if config is not None:
        kwargs.update(epilog=fields_help(config), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser: argparse.ArgumentParser = sub.add_parser(name, **kwargs)
    return parser


def add_engine_and_shards(p: argparse.ArgumentParser, shards: str) -> None:
    """``--engine``, ``--address`` and ``--shards N`` (document shards; ``shards`` is its help) on ``p``."""
    from contrastlab.scale.cluster import add_engine_arguments

    add_engine_arguments(p)
    p.add_argument("--shards", type=int, default=None, help=shards)


def model_overrides(args: argparse.Namespace, rest: Sequence[str]) -> dict[str, Any]:
    """The overrides of a command on an optional MODEL: ``rest``'s, then MODEL, ``--pairs`` and ``--quiet``."""
    from contrastlab.config import parse_overrides

    overrides: dict[str, Any] = dict(parse_overrides(rest))
    for name in ("model", "pairs"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.quiet:
        overrides["progress"] = False
    return overrides


def fields_help(cls: type) -> str:
    """The epilog of a command that takes ``--FIELD VALUE`` overrides: each field of ``cls``, its doc and default."""
    from contrastlab.config import LIST_FORMS, describe_fields

    rows = describe_fields(cls)
    width = max((len(n) for n, _, _ in rows), default=0)
    lines = [f"  {n:<{width}}  {doc} [default: {d}]" for n, d, doc in rows]
    return f"config fields (set in the file or override on the command line; {LIST_FORMS}):\n" + "\n".join(lines)


def load_matrix(path: str, key: str | None, name: str) -> np.ndarray:
    """Load an array from ``.npy`` (memory-mapped) or ``.safetensors`` (tensor ``key``); errors name ``name``."""
    from contrastlab.npyfile import NpyFormatError, load_npy

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{name}: no such file {path}")
    if p.suffix == ".npy":
        if key is not None:
            raise ValueError(f"{name}: --key applies to .safetensors files, not {path}")
        try:
            return load_npy(p, mmap=True)
        except NpyFormatError as e:
            raise ValueError(f"{name}: {e}") from None
    if p.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(p), framework="np") as f:
                keys = list(f.keys())
                if key is None:
                    if len(keys) != 1:
                        raise ValueError(f"{name}: {path} holds tensors {keys}; choose one with its --key option")
                    key = keys[0]
                if key not in keys:
                    raise ValueError(f"{name}: {path} has no tensor {key!r} (it has {keys})")
                return f.get_tensor(key)
        except SafetensorError as e:
            raise ValueError(f"{name}: cannot read {path} ({e})") from None
    raise ValueError(f"{name}: {path} must be a .npy or .safetensors file")
