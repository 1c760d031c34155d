"""Frozen-dataclass configs: type checks that name the field, dict/YAML/TOML round-trips, overrides.

A config is a tree of frozen dataclasses with a docstring under every field. This module turns one
into a plain dict and back (:func:`to_dict`, :func:`from_dict`), reads and writes YAML/TOML files
(:func:`load_config_file`, :func:`dump_config`), applies dotted command-line overrides
(``--loss.temperature 0.2``, :func:`apply_overrides`) and checks every field against its annotation
(:func:`check_fields`). Unknown keys are errors, never ignored, and every message starts with the
dotted field name (``optim.lr must be a float, got str 'abc'``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import reprlib
import sys
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

__all__ = [
    "ConfigError",
    "check_fields",
    "from_dict",
    "to_dict",
    "apply_overrides",
    "parse_overrides",
    "load_config_file",
    "read_config",
    "dump_config",
    "field_docs",
    "describe_fields",
    "format_value",
    "LIST_FORMS",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is unknown, ill-typed or out of range; the message starts with the field name."""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 80, 80, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def _show(value: Any) -> str:
    """A bounded ``repr`` for error messages: a YAML file of a few lines can alias one list into 2**30 leaves."""
    return _REPR.repr(value)


def _to_float(value: int, path: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{path} must be a float, got an int of {value.bit_length()} bits") from None


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    if origin in (tuple, list):
        return "a list"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"a {tp.__name__} table"
    return {bool: "a bool", int: "an int", float: "a float", str: "a string"}.get(tp, str(tp))


def _matches(value: Any, tp: Any) -> bool:
    """Whether ``value`` is an instance of the annotation ``tp`` (the subset configs use)."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
    if dataclasses.is_dataclass(tp):
        return isinstance(value, tp)  # type: ignore[arg-type]
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def check_fields(obj: Any) -> None:
    """Check every field of a dataclass instance against its annotation.

    Floats must be finite. Call from ``__post_init__``.

    Raises:
        ConfigError: naming the first ill-typed field, e.g. ``lr must be a float, got str 'x'``.
    """
    for name, tp in _hints(type(obj)).items():
        if name not in {f.name for f in dataclasses.fields(obj)}:
            continue
        value = getattr(obj, name)
        if not _matches(value, tp):
            raise ConfigError(f"{name} must be {_type_name(tp)}, got {type(value).__name__} {_show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name} must be finite, got {_show(value)}")


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Convert a plain (YAML/TOML/JSON) value to the annotation ``tp``: lists → tuples, ints → floats."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):  # type: ignore[arg-type]
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be {_type_name(tp)}, got {type(value).__name__} {_show(value)}")
        return from_dict(tp, value, _prefix=path + ".")  # type: ignore[arg-type]
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if any(_matches(value, a) for a in args):
            return _to_float(value, path) if float in args and isinstance(value, int) and int not in args else value
        for a in args:
            if a is not type(None):
                try:
                    return _convert(value, a, path)
                except ConfigError:
                    pass
        raise ConfigError(f"{path} must be {_type_name(tp)}, got {type(value).__name__} {_show(value)}")
    if origin is tuple and isinstance(value, (list, tuple)):
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{path} must have {len(args)} entries, got {len(value)}")
        return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return _to_float(value, path)
    if not _matches(value, tp):
        raise ConfigError(f"{path} must be {_type_name(tp)}, got {type(value).__name__} {_show(value)}")
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], *, _prefix: str = "") -> T:
    """Build the dataclass ``cls`` from a nested dict, rejecting unknown keys and ill-typed values.

    Missing keys take the field's default. Errors name the dotted path (``optim.lr``).

    Raises:
        ConfigError: an unknown key, an ill-typed value or a value out of range.
    """
    if not isinstance(data, Mapping):
        where = _prefix.rstrip(".") or "config"
        raise ConfigError(f"{where} must be a table of fields, got {type(data).__name__}")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"{_prefix}{key} is not a field of {cls.__name__}; known fields: {', '.join(names)}")
        kwargs[key] = _convert(value, hints[key], _prefix + key)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{_prefix}{e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{_prefix}{e}") from None


def to_dict(obj: Any) -> dict[str, Any]:
    """The nested plain dict of a dataclass config (tuples become lists, so it dumps to YAML/TOML/JSON)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, Path):
            return str(v)
        return v

    out = plain(obj)
    if not isinstance(out, dict):
        raise TypeError(f"obj must be a dataclass instance, got {type(obj).__name__}")
    return out


def _field_type(cls: type, dotted: str) -> Any:
    tp: Any = cls
    walked: list[str] = []
    for part in dotted.split("."):
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            raise ConfigError(f"{'.'.join(walked)} has no sub-fields (cannot set {dotted})")
        hints = _hints(tp)
        if part not in hints or part not in {f.name for f in dataclasses.fields(tp)}:
            known = ", ".join(f.name for f in dataclasses.fields(tp))
            raise ConfigError(f"{dotted} is not a field of {tp.__name__}; known fields: {known}")
        tp = hints[part]
        walked.append(part)
    return tp


def _parse_text(text: str, tp: Any, path: str) -> Any:
    """Parse a command-line string for a field of annotation ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is str or (origin is Literal and all(isinstance(a, str) for a in args)):
        return text
    if origin in (Union, types.UnionType) and type(None) in args and text.lower() in ("none", "null"):
        return None
    if tp is bool or (origin in (Union, types.UnionType) and bool in args):
        low = text.lower()
        if low in ("true", "yes", "1", "on"):
            return True
        if low in ("false", "no", "0", "off"):
            return False
    listed = _list_type(tp)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if listed is not None:  # 64,64 or linear,monomial or [linear, monomial]
            return _parse_list(text, listed, path)
        if origin in (Union, types.UnionType) and str in args:
            return text
        if tp is float or (origin in (Union, types.UnionType) and float in args):
            try:  # inf, -inf (as --help prints an infinite default), nan: Python's float literals
                return float(text)
            except ValueError:
                pass
        raise ConfigError(f"{path} must be {_type_name(tp)}, got {text!r}") from None
    if listed is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    return value


def _list_type(tp: Any) -> Any:
    """The list (tuple) annotation of a field: ``tp`` itself, or the one list member of a union; else ``None``."""
    if typing.get_origin(tp) in (tuple, list):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        lists = [a for a in typing.get_args(tp) if typing.get_origin(a) in (tuple, list)]
        return lists[0] if len(lists) == 1 else None
    return None


def _parse_list(text: str, tp: Any, path: str) -> list[Any]:
    """A list typed on the command line: ``a,b,c``, or bracketed ``[a, b, c]`` (items optionally quoted).

    Each item is parsed for the element type (``tuple[int, ...]``: ints; ``tuple[float, float]``: per position).
    """
    inner = text.strip()
    if len(inner) >= 2 and (inner[0], inner[-1]) in (("[", "]"), ("(", ")")):
        inner = inner[1:-1]
    items = [t.strip() for t in inner.split(",")]
    if items[-1] == "":  # "" is the empty list; "a,b," a trailing comma
        items.pop()
    if "" in items:
        raise ConfigError(f"{path} has an empty item in {text!r}; {LIST_FORMS}")
    args = typing.get_args(tp)
    homogeneous = not args or (len(args) == 2 and args[1] is Ellipsis)
    out = []
    for i, item in enumerate(items):
        if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
            item = item[1:-1]
        elem = (args[0] if args else Any) if homogeneous else (args[i] if i < len(args) else Any)
        out.append(item if elem is Any else _parse_text(item, elem, f"{path}[{i}]"))
    return out


LIST_FORMS = "a list is comma-separated (a,b,c) or bracketed ('[a, b, c]')"
"""How a list-valued field is written on the command line; both forms are read (and ``--help`` shows the first)."""


def format_value(value: Any) -> str:
    """A field value as it is typed on the command line: lists comma-separated (``linear,monomial``, ``[]``).

    A list whose items would not read back that way (strings holding commas, brackets or quotes, nested
    lists) is shown bracketed, as :func:`ast.literal_eval` reads it.
    """
    plain = to_dict_value(value)
    if not isinstance(plain, list):
        return repr(plain)
    if not plain:
        return "[]"
    simple = all(
        (isinstance(v, (int, float)) and not isinstance(v, bool))
        or (isinstance(v, str) and v == v.strip() and v and not set(v) & set(",[]()'\""))
        for v in plain
    )
    return ",".join(str(v) for v in plain) if simple else repr(plain)


def parse_overrides(argv: Sequence[str]) -> dict[str, str]:
    """Split ``["--loss.temperature", "0.2", "--steps=10"]`` into a dict of dotted field -> text.

    Raises:
        ConfigError: an argument is not ``--key value`` or ``--key=value``.
    """
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"{arg}: expected an override --field.name VALUE")
        key = arg[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv):
                raise ConfigError(f"--{key} needs a value")
            value = argv[i + 1]
            i += 2
        out[key.replace("-", "_")] = value
    return out


def apply_overrides(config: T, overrides: Mapping[str, Any]) -> T:
    """Return ``config`` with dotted fields replaced (``{"loss.temperature": "0.2"}``).

    String values are parsed for the field's type (``"0.2"`` → 0.2, ``"64,64"`` → (64, 64),
    ``"none"`` → None for optional fields); other values are used as they are.

    Raises:
        ConfigError: an unknown field or a value of the wrong type, naming the dotted field.
    """
    data = to_dict(config)
    for dotted, raw in overrides.items():
        tp = _field_type(type(config), dotted)
        value = _parse_text(raw, tp, dotted) if isinstance(raw, str) else raw
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = to_dict(value) if dataclasses.is_dataclass(value) else value
    return from_dict(type(config), data)


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads(text)


def _toml_dumps(data: Mapping[str, Any]) -> str:
    """A small TOML writer for config dicts (scalars, lists of scalars, nested tables; None omitted)."""

    def scalar(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    lines: list[str] = []

    def table(d: Mapping[str, Any], name: str) -> None:
        subs = [(k, v) for k, v in d.items() if isinstance(v, Mapping)]
        if name:
            lines.append(f"[{name}]")
        for k, v in d.items():
            if v is not None and not isinstance(v, Mapping):
                lines.append(f"{k} = {scalar(v)}")
        lines.append("")
        for k, v in subs:
            table(v, f"{name}.{k}" if name else k)

    table(data, "")
    return "\n".join(lines).strip() + "\n"


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``), TOML (``.toml``) or JSON config file into a dict.

    Raises:
        ConfigError: the file is missing, has an unknown suffix or does not parse.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p} is not UTF-8 text ({e})") from None
    suffix = p.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif suffix == ".toml":
            data = _toml_loads(text)
        elif suffix == ".json":
            import json

            data = json.loads(text)
        else:
            raise ConfigError(f"config file {p} must end in .yaml, .yml, .toml or .json")
    except ConfigError:
        raise
    except Exception as e:  # each parser has its own error class
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"config file {p} does not parse: {msg}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a table of fields, got {type(data).__name__}")
    return data


def read_config(cls: type[T], path: str | Path, *, verified: bool = False) -> T:
    """Read the config file ``path`` (YAML, TOML or JSON by suffix) into the dataclass ``cls``.

    :func:`load_config_file` then :func:`from_dict`; every error names the file and, for a bad value,
    the dotted field (``config file run.yaml: optim.lr must be a float, got str 'x'``). A JSON file
    that contrastlab wrote (a run's ``config.json``, which carries a ``contrastlab_sha256`` member) is
    verified against its checksum first (:func:`contrastlab.io.read_json_verified`).

    Args:
        cls: the config dataclass.
        path: the file.
        verified: require the checksum (for a run folder's ``config.json``).

    Raises:
        ConfigError: the file is missing, does not parse, fails its checksum, or holds an unknown or
            ill-typed field.
    """
    from contrastlab.io import CHECKSUM_KEY, CorruptFileError, read_json_verified

    p = Path(path)
    data = load_config_file(p)
    if verified or CHECKSUM_KEY in data:
        try:
            data = read_json_verified(p)
        except CorruptFileError as e:
            raise ConfigError(f"config file {e}") from None
    try:
        return from_dict(cls, data)
    except ConfigError as e:
        raise ConfigError(f"config file {p}: {e}") from None


def dump_config(config: Any, path: str | Path) -> None:
    """Write a dataclass config to ``path`` (YAML, TOML or JSON by suffix), atomically.

    ``None`` fields are omitted in TOML (which has no null); they take their default when read back,
    so give optional fields a ``None`` default.
    """
    from contrastlab.io import write_text_atomic

    p = Path(path)
    data = to_dict(config)
    suffix = p.suffix.lower()
    if suffix in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(data, sort_keys=False)
    elif suffix == ".toml":
        text = _toml_dumps(data)
    elif suffix == ".json":
        import json

        text = json.dumps(data, indent=2) + "\n"
    else:
        raise ConfigError(f"path must end in .yaml, .yml, .toml or .json, got {p.name}")
    write_text_atomic(p, text)


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of a dataclass (``{field: doc}``), for ``--help``.

    Fields inherited from a dataclass base keep the base's docstring unless the class redefines them.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is cls or dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    """The field docstrings written in ``cls``'s own body."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(textwrap.dedent(source))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:], strict=False):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = " ".join(node.value.value.split())
    return docs


def describe_fields(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(--dotted.name, default, doc)`` for every leaf field of a dataclass config, for ``--help``."""
    import dataclasses as dc

    rows: list[tuple[str, str, str]] = []
    docs = field_docs(cls)
    hints = _hints(cls)
    for f in dc.fields(cls):
        tp = hints.get(f.name)
        default: Any = f.default
        if f.default_factory is not dc.MISSING:
            default = f.default_factory()
        if dataclasses.is_dataclass(tp):
            rows.extend(describe_fields(tp, f"{prefix}{f.name}."))  # type: ignore[arg-type]
            continue
        shown = "required" if default is dc.MISSING else format_value(default)
        rows.append((f"--{prefix}{f.name}", shown, docs.get(f.name, "")))
    return rows


def to_dict_value(v: Any) -> Any:
    """A field value as it appears in a config file (tuples as lists)."""
    if isinstance(v, tuple):
        return [to_dict_value(x) for x in v]
    return v
