"""Rows of a task's files, verified as they are read: text files, their lines, records with unique string ids.

Shared by the BEIR reader (:mod:`contrastlab.tasks.beir`) and the hub-layout reader (:mod:`contrastlab.tasks.hub`),
so both refuse the same defects with the same messages, naming the file and line (or row).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from contrastlab.data.text.pairs import _decode

__all__: list[str] = []


def _read(path: Path) -> tuple[str, str]:
    """The file's text (verified UTF-8 without NUL bytes, not empty) and its SHA-256."""
    if not path.is_file():
        raise ValueError(f"task: {path} is missing")
    data = path.read_bytes()
    text = _decode(path, data)  # UTF-16/32 and invalid UTF-8 fail here, naming the file and line
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise ValueError(f"task: {path} line {line}: a NUL byte (binary data, not text)")
    if not text.strip():
        raise ValueError(f"task: {path} is empty")
    return text, hashlib.sha256(data).hexdigest()


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for every non-blank line, CR LF or LF endings."""
    for n, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if line.strip():
            yield n, line


def _json_lines(path: Path, text: str) -> list[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line of a JSONL file's text."""
    objects: list[tuple[int, Any]] = []
    for n, line in _lines(text):
        try:
            objects.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            raise ValueError(f"task: {path} line {n}: not JSON ({e.msg})") from None
    return objects


def _records(
    path: Path,
    objects: Iterable[tuple[int, Any]],
    fields: tuple[str, ...],
    optional: tuple[str, ...],
    *,
    unit: str = "line",
    aliases: Mapping[str, str] | None = None,
) -> list[tuple[str, ...]]:
    """The string ``fields`` (required) and ``optional`` ones ('' when absent) of each ``(number, object)``.

    The first field is a unique, non-empty id; ``aliases`` maps a field to another name it may go by.
    """
    rows: list[tuple[str, ...]] = []
    seen: dict[str, int] = {}
    for n, obj in objects:
        if not isinstance(obj, dict):
            raise ValueError(f"task: {path} {unit} {n}: not a JSON object")
        row = []
        for name in fields + optional:
            value = obj.get(name)
            if value is None and aliases and name in aliases:
                value = obj.get(aliases[name])
            if value is None and name in optional:
                value = ""
            if value is None:
                raise ValueError(f"task: {path} {unit} {n}: no {name!r} field")
            if not isinstance(value, str):
                raise ValueError(f"task: {path} {unit} {n}: {name!r} must be a string, got {type(value).__name__}")
            row.append(value)
        key = row[0]
        if not key:
            raise ValueError(f"task: {path} {unit} {n}: empty {fields[0]!r}")
        if key in seen:
            raise ValueError(f"task: {path} {unit} {n}: duplicate id {key!r} (first on {unit} {seen[key]})")
        seen[key] = n
        rows.append(tuple(row))
    return rows
