"""A retrieval task as MTEB keeps it on the Hugging Face hub: ``corpus``, ``queries``, ``qrels`` subsets.

A local snapshot of such a dataset repository is read and verified like a BEIR folder.

MTEB's retrieval loader (Muennighoff et al. 2022, arXiv:2210.07316) reads three configs of a dataset repository:
``corpus`` (``id`` or ``_id``, ``text``, optional ``title``), ``queries`` (``id`` or ``_id``, ``text``) and the
qrels (``query-id``, ``corpus-id``, ``score``), whose files sit in the snapshot as::

    corpus/<split>-00000-of-00001.parquet     (or .jsonl; any file name: every data file of the folder)
    queries/<split>-00000-of-00001.parquet
    qrels/<split>-00000-of-00001.parquet      (or qrels/<split>.jsonl)

``corpus.jsonl`` and ``queries.jsonl`` at the top are read too, so a snapshot that mixes the two layouts reads.
When a subset's folder holds files of several splits, those named for the requested split are read. Parquet
needs pyarrow (installed with the ``text`` extra); JSONL needs nothing.

Every check of the BEIR reader applies (:mod:`contrastlab.tasks.beir`): string ids, unique and non-empty; text
present; integer grades; no judgement twice; every qrels id names a query and a document.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contrastlab.tasks.records import _json_lines, _read, _records

__all__ = ["hub_splits", "is_hub_task", "read_hub_parts"]

_DATA = (".parquet", ".jsonl")
_SHARD = re.compile(r"^(?P<split>.+?)-\d{5}-of-\d{5}$")


def _split_of(path: Path) -> str:
    stem = path.name[: -len(path.suffix)]
    m = _SHARD.match(stem)
    return m.group("split") if m else stem


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*") if p.is_file() and p.suffix in _DATA) if folder.is_dir() else []


def hub_splits(path: str | Path) -> list[str]:
    """The qrels splits of a hub snapshot (``qrels/<split>-*.parquet``, ``qrels/<split>.jsonl``), sorted."""
    return sorted({_split_of(p) for p in _data_files(Path(path) / "qrels")})


def _subset(root: Path, name: str, split: str) -> list[Path]:
    """The files of subset ``name``: ``<name>.jsonl`` at the top, else the folder's data files.

    When the folder holds several splits, those of ``split``.
    """
    top = root / f"{name}.jsonl"
    if top.is_file():
        return [top]
    files = _data_files(root / name)
    if len({_split_of(p) for p in files}) > 1:
        files = [p for p in files if _split_of(p) == split]
    return files


def is_hub_task(path: str | Path) -> bool:
    """Whether ``path`` holds a corpus, queries (a folder of data files or a top-level JSONL) and qrels files."""
    p = Path(path)
    return bool(_subset(p, "corpus", "test")) and bool(_subset(p, "queries", "test")) and bool(_data_files(p / "qrels"))


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            f"task: {path} is parquet; reading it needs pyarrow (pip install 'contrastlab[text]'), or convert the "
            "snapshot to JSONL"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow's ArrowInvalid and friends: a file that is not parquet
        raise ValueError(f"task: {path} is not a readable parquet file ({' '.join(str(e).split())[:200]})") from None
    yield from enumerate(table.to_pylist(), 1)


def _objects(path: Path, text_of: dict[Path, tuple[str, str]]) -> tuple[list[tuple[int, Any]], str]:
    """``(number, object)`` of every row of a parquet or JSONL file, and the unit a message counts in."""
    if path.suffix == ".parquet":
        data = path.read_bytes()
        text_of[path] = ("", hashlib.sha256(data).hexdigest())
        return list(_parquet_rows(path)), "row"
    text, digest = _read(path)
    text_of[path] = (text, digest)
    return _json_lines(path, text), "line"


def read_hub_parts(
    root: Path, split: str
) -> tuple[
    list[tuple[str, ...]],
    list[tuple[str, ...]],
    dict[str, dict[str, int]],
    dict[tuple[str, str], str],
    Path,
    dict[str, str],
]:
    """Read and verify the three subsets of a hub snapshot for ``split``.

    Returns:
        The corpus rows ``(id, text, title)``, the query rows ``(id, text)``, the qrels, where each judgement
        was read (``"<file> row N"``), the first qrels file, and each file's SHA-256 (relative name → hex).

    Raises:
        ValueError: a missing split or subset, or a defect of a file, naming the file and row or line.
    """
    splits = hub_splits(root)
    if split not in splits:
        raise ValueError(
            f"split: {split!r} is not a split of {root} (no qrels/{split}*.parquet or .jsonl); "
            f"it has: {', '.join(splits) or 'no qrels files'}"
        )
    hashes: dict[Path, tuple[str, str]] = {}
    parts: dict[str, list[tuple[str, ...]]] = {}
    for subset, fields, optional in (("corpus", ("_id", "text"), ("title",)), ("queries", ("_id", "text"), ())):
        files = _subset(root, subset, split)
        if not files:
            raise ValueError(f"task: {root} has no {subset} ({subset}.jsonl or {subset}/*.parquet)")
        rows: list[tuple[str, ...]] = []
        seen: dict[str, Path] = {}
        for path in files:
            objects, unit = _objects(path, hashes)
            if not objects:
                raise ValueError(f"task: {path} is empty")
            for row in _records(path, objects, fields, optional, unit=unit, aliases={"_id": "id"}):
                if row[0] in seen:
                    raise ValueError(f"task: {path}: duplicate id {row[0]!r} (also in {seen[row[0]]})")
                seen[row[0]] = path
                rows.append(row)
        parts[subset] = rows
    qrels: dict[str, dict[str, int]] = {}
    where: dict[tuple[str, str], str] = {}
    qfiles = [p for p in _data_files(root / "qrels") if _split_of(p) == split]
    for path in qfiles:
        objects, unit = _objects(path, hashes)
        for n, obj in objects:
            if not isinstance(obj, dict):
                raise ValueError(f"task: {path} {unit} {n}: not a JSON object")
            cells = []
            for column in ("query-id", "corpus-id"):
                value = obj.get(column)
                if isinstance(value, int) and not isinstance(value, bool):
                    value = str(value)
                if not isinstance(value, str) or not value.strip():
                    raise ValueError(f"task: {path} {unit} {n}: {column!r} must be a non-empty string id")
                cells.append(value.strip())
            score = obj.get("score")
            if isinstance(score, float) and score.is_integer():
                score = int(score)
            if isinstance(score, bool) or not isinstance(score, int):
                raise ValueError(f"task: {path} {unit} {n}: score {score!r} is not an integer grade")
            q, d = cells
            judged = qrels.setdefault(q, {})
            if d in judged:
                raise ValueError(f"task: {path} {unit} {n}: query {q!r} judges document {d!r} twice")
            judged[d] = score
            where[(q, d)] = f"{path} {unit} {n}"
    if not qrels:
        raise ValueError(f"task: {root / 'qrels'} holds no judgements for split {split!r}")
    return (
        parts["corpus"],
        parts["queries"],
        qrels,
        where,
        qfiles[0],
        {p.relative_to(root).as_posix(): h for p, (_, h) in hashes.items()},
    )
