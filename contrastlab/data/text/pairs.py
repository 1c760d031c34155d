"""Text pairs (anchor, positive[, negatives…]) read from TSV, CSV, JSONL or a saved Hugging Face dataset.

The container every text task uses: the code corpus (:mod:`contrastlab.data.text.code_corpus`) turns into one,
the sentence-transformers bridge (:mod:`contrastlab.adapters.sentence_transformers`) trains on one
(:meth:`TextPairs.to_hf_dataset`), and ``contrastlab audit --pairs FILE`` evaluates on one.

File formats (UTF-8; a byte-order mark is allowed; a final newline is optional):

* ``.tsv`` — one pair per line, cells separated by tabs, no quoting;
* ``.csv`` — RFC 4180 through :mod:`csv` (quoted cells may hold commas and newlines);
* ``.jsonl`` — one JSON value per line: a list of strings, or an object with ``"anchor"`` and
  ``"positive"`` and optionally ``"negatives"`` (a list) or ``"negative"``, ``"negative_1"``, … ;
* a folder written by ``datasets.Dataset.save_to_disk`` — its string columns in order (a
  ``DatasetDict`` needs ``split``).

TSV and CSV have no header unless ``header=True``. Every row must have the same number of cells (at
least two) and no cell may be empty or blank. Bad input raises ``ValueError`` naming the file and the
line: an empty line, bytes that are not UTF-8 (a UTF-16 or UTF-32 file, with or without a byte-order
mark, is named as such), a NUL character in a cell, a row with the wrong number of cells, a JSON line
that does not parse.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TextPairs", "read_text_pairs", "write_text_pairs", "PAIR_FORMATS"]

PAIR_FORMATS = (".tsv", ".csv", ".jsonl")
"""File suffixes :func:`read_text_pairs` reads (a folder is read as a saved Hugging Face dataset)."""


def default_columns(width: int) -> tuple[str, ...]:
    """``("anchor", "positive", "negative_1", …)`` for rows of ``width`` cells."""
    return ("anchor", "positive", *(f"negative_{i}" for i in range(1, width - 1)))


@dataclass(frozen=True)
class TextPairs:
    """Rows of texts: an anchor, its positive, and optionally hard negatives, all rows of one width.

    Attributes:
        rows: ``(anchor, positive, negative_1, …)`` per row.
        columns: the column names, ``len(columns) == len(row)``.
        name: a short name for logs and reports (e.g. the file name).

    Raises:
        ValueError: no rows, rows of different widths, fewer than two columns, an empty cell or a NUL
            character.
        TypeError: a cell that is not a string.

    Examples:
        >>> pairs = TextPairs((("a query", "its answer"),))
        >>> pairs.columns, len(pairs), pairs.num_negatives
        (('anchor', 'positive'), 1, 0)
    """

    rows: tuple[tuple[str, ...], ...]
    columns: tuple[str, ...] = ()
    name: str = "pairs"

    def __post_init__(self) -> None:
        rows = tuple(tuple(r) for r in self.rows)
        if not rows:
            raise ValueError("rows must hold at least one pair")
        width = len(rows[0])
        if width < 2:
            raise ValueError(f"rows must have at least 2 cells (anchor, positive), got {width}")
        for i, r in enumerate(rows):
            if len(r) != width:
                raise ValueError(f"rows[{i}] has {len(r)} cells, rows[0] has {width}")
            for c in r:
                if not isinstance(c, str):
                    raise TypeError(f"rows[{i}] holds a {type(c).__name__}, not a str")
                if not c.strip():
                    raise ValueError(f"rows[{i}] has an empty cell")
                if "\x00" in c:
                    raise ValueError(f"rows[{i}] holds a NUL character")
        columns = tuple(self.columns) or default_columns(width)
        if len(columns) != width or len(set(columns)) != width:
            raise ValueError(f"columns must be {width} distinct names, got {columns!r}")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "columns", columns)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[str, ...]:
        return self.rows[i]

    @property
    def num_negatives(self) -> int:
        """Hard negatives per row."""
        return len(self.columns) - 2

    @property
    def anchors(self) -> list[str]:
        """The first column."""
        return [r[0] for r in self.rows]

    @property
    def positives(self) -> list[str]:
        """The second column."""
        return [r[1] for r in self.rows]

    def column(self, j: int) -> list[str]:
        """Column ``j`` as a list."""
        return [r[j] for r in self.rows]

    def to_hf_dataset(self) -> Any:
        """A ``datasets.Dataset`` with one string column per column (what ``SentenceTransformerTrainer`` reads)."""
        import datasets

        return datasets.Dataset.from_dict({c: self.column(j) for j, c in enumerate(self.columns)})


def _wide_encoding(data: bytes) -> str | None:
    """The name of a UTF-16/UTF-32 encoding that ``data`` looks like (by its BOM or its NUL bytes), or None.

    Text in those encodings is mostly ASCII code units with NUL high bytes: in UTF-16 without a BOM
    one byte of each pair is NUL (the odd ones in little-endian), in UTF-32 three of each four. UTF-8
    text holds no NUL at all, so an aligned run of NULs in the first 4 KiB tells the encoding.
    """
    for bom, name in ((b"\xff\xfe\x00\x00", "UTF-32-LE"), (b"\x00\x00\xfe\xff", "UTF-32-BE")):
        if data.startswith(bom):
            return f"{name} (byte-order mark)"
    for bom, name in ((b"\xff\xfe", "UTF-16-LE"), (b"\xfe\xff", "UTF-16-BE")):
        if data.startswith(bom):
            return f"{name} (byte-order mark)"
    head = data[:4096]
    head = head[: len(head) // 4 * 4]
    if not head or b"\x00" not in head:
        return None
    lanes = [head[j::4].count(0) / (len(head) // 4) for j in range(4)]  # NUL share of each byte lane
    nul = [f > 0.9 for f in lanes]
    empty = [f < 0.1 for f in lanes]
    if nul == [False, True, True, True] and empty[0]:
        return "UTF-32-LE without a byte-order mark"
    if nul == [True, True, True, False] and empty[3]:
        return "UTF-32-BE without a byte-order mark"
    if nul == [False, True, False, True] and empty[0] and empty[2]:
        return "UTF-16-LE without a byte-order mark"
    if nul == [True, False, True, False] and empty[1] and empty[3]:
        return "UTF-16-BE without a byte-order mark"
    return None


def _decode(path: Path, data: bytes) -> str:
    wide = _wide_encoding(data)
    if wide is not None:
        raise ValueError(f"path: {path} is in the wrong encoding: it looks like {wide}; save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"path: {path} line {line}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _check_row(path: Path, line: int, cells: Sequence[Any], width: int | None) -> tuple[str, ...]:
    if not cells or all(isinstance(c, str) and not c.strip() for c in cells):
        raise ValueError(f"path: {path} line {line}: empty line")
    if len(cells) < 2:
        raise ValueError(f"path: {path} line {line}: {len(cells)} column, need at least 2 (anchor, positive)")
    if width is not None and len(cells) != width:
        raise ValueError(f"path: {path} line {line}: {len(cells)} columns, the first row has {width}")
    for j, c in enumerate(cells):
        if not isinstance(c, str):
            raise ValueError(f"path: {path} line {line}: column {j + 1} is a {type(c).__name__}, not a string")
        if not c.strip():
            raise ValueError(f"path: {path} line {line}: column {j + 1} is empty")
        if "\x00" in c:
            raise ValueError(
                f"path: {path} line {line}: column {j + 1} holds a NUL byte (a binary file, or text in another "
                "encoding than UTF-8?)"
            )
    return tuple(cells)


def _jsonl_cells(path: Path, line: int, value: Any) -> tuple[list[Any], list[str] | None]:
    if isinstance(value, list):
        return value, None
    if not isinstance(value, dict):
        raise ValueError(f"path: {path} line {line}: expected a JSON list or object, got {type(value).__name__}")
    if "anchor" not in value or "positive" not in value:
        raise ValueError(f"path: {path} line {line}: an object needs 'anchor' and 'positive' keys")
    negs = value.get("negatives", [])
    if not isinstance(negs, list):
        raise ValueError(f"path: {path} line {line}: 'negatives' must be a list")
    extra = sorted((k for k in value if k == "negative" or k.startswith("negative_")), key=lambda k: (len(k), k))
    keys = ["anchor", "positive", *extra]
    cells = [value[k] for k in keys] + negs
    names = keys + [f"negatives[{i}]" for i in range(len(negs))]
    return cells, names


def _read_rows(path: Path, suffix: str, header: bool) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    text = _decode(path, path.read_bytes())
    rows: list[tuple[str, ...]] = []
    columns: tuple[str, ...] = ()
    width: int | None = None
    if suffix == ".csv":
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        start = 1
        try:
            for cells in reader:
                line = start
                start = reader.line_num + 1
                if header and not columns:
                    columns = tuple(_check_row(path, line, cells, None))
                    width = len(columns)
                    continue
                row = _check_row(path, line, cells, width)
                width = len(row)
                rows.append(row)
        except csv.Error as e:
            raise ValueError(f"path: {path} line {reader.line_num}: not valid CSV ({e})") from None
        return rows, columns
    for line, raw in enumerate(_lines(text), start=1):
        if suffix == ".tsv":
            cells = raw.split("\t") if raw.strip() else []
            if header and not columns:
                columns = tuple(_check_row(path, line, cells, None))
                width = len(columns)
                continue
        else:
            if not raw.strip():
                raise ValueError(f"path: {path} line {line}: empty line")
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValueError(f"path: {path} line {line}: not valid JSON ({e.msg})") from None
            cells, names = _jsonl_cells(path, line, value)
            if names is not None and not columns:
                columns = tuple(names)
        row = _check_row(path, line, cells, width)
        width = len(row)
        rows.append(row)
    return rows, columns


def _read_hf(path: Path, split: str | None) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    try:
        import datasets
    except ImportError:
        raise ValueError(f"path: {path} is a folder; reading a saved dataset needs `pip install datasets`") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise ValueError(f"path: {path} is not a dataset saved with save_to_disk ({e})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split is None or split not in ds:
            raise ValueError(f"split: {path} holds splits {sorted(ds)}; name one, got {split!r}")
        ds = ds[split]
    cols = [c for c, f in ds.features.items() if getattr(f, "dtype", None) in ("string", "large_string")]
    if len(cols) < 2:
        raise ValueError(f"path: {path} has {len(cols)} string column(s) {cols}, need at least 2 (anchor, positive)")
    data = [ds[c] for c in cols]
    rows = []
    for i, cells in enumerate(zip(*data, strict=True)):
        rows.append(_check_row(path, i + 1, [c if c is not None else "" for c in cells], len(cols)))
    return rows, tuple(cols)


def read_text_pairs(path: str | Path, *, header: bool = False, split: str | None = None) -> TextPairs:
    """Read (anchor, positive[, negatives…]) rows from a file or a saved Hugging Face dataset.

    Args:
        path: a ``.tsv``, ``.csv`` or ``.jsonl`` file, or a folder written by ``save_to_disk``.
        header: the first TSV/CSV line names the columns.
        split: the split of a saved ``DatasetDict``.

    Returns:
        :class:`TextPairs` named after the file; "line" in errors of a saved dataset is the row number
        counted from 1.

    Raises:
        ValueError: a missing path, an unknown suffix, or bad content (the message names file and line).

    Examples:
        >>> pairs = read_text_pairs("pairs.tsv")  # doctest: +SKIP
    """
    p = Path(path)
    if p.is_dir():
        rows, columns = _read_hf(p, split)
    elif not p.is_file():
        raise ValueError(f"path: {p} does not exist")
    else:
        suffix = p.suffix.lower()
        if suffix not in PAIR_FORMATS:
            raise ValueError(f"path: {p} has suffix {suffix!r}; known: {', '.join(PAIR_FORMATS)} or a dataset folder")
        rows, columns = _read_rows(p, suffix, header)
    if not rows:
        raise ValueError(f"path: {p} holds no rows")
    if columns and len(columns) != len(rows[0]):
        columns = ()
    return TextPairs(tuple(rows), columns, p.name)


def write_text_pairs(pairs: TextPairs, path: str | Path) -> None:
    """Write ``pairs`` to a ``.tsv``, ``.csv`` or ``.jsonl`` file that :func:`read_text_pairs` reads back.

    TSV and CSV get no header (their columns are positional: anchor, positive, negatives); JSONL gets
    one object per row keyed by ``pairs.columns``. The file is written atomically (all or nothing).

    Raises:
        ValueError: naming ``path``, for an unknown suffix or a cell that a ``.tsv`` cannot hold (a tab
            or a line break; write ``.csv`` or ``.jsonl`` instead).
    """
    from contrastlab.io import atomic_path

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in PAIR_FORMATS:
        raise ValueError(f"path: {p} has suffix {suffix!r}; known: {', '.join(PAIR_FORMATS)}")
    buf = io.StringIO(newline="")
    if suffix == ".tsv":
        for i, row in enumerate(pairs.rows):
            if any(ch in c for c in row for ch in "\t\n\r"):
                raise ValueError(f"path: {p}: row {i + 1} holds a tab or a line break; write .csv or .jsonl instead")
            buf.write("\t".join(row) + "\n")
    elif suffix == ".csv":
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows(pairs.rows)
    else:
        for row in pairs.rows:
            buf.write(json.dumps(dict(zip(pairs.columns, row, strict=True)), ensure_ascii=False) + "\n")
    with atomic_path(p) as tmp:
        tmp.write_bytes(buf.getvalue().encode("utf-8"))
