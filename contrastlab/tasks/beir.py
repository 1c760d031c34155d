"""A retrieval task in BEIR's layout, read and verified: corpus, queries and graded relevance judgements.

BEIR (Thakur et al. 2021, arXiv:2104.08663) and MTEB (Muennighoff et al. 2022, arXiv:2210.07316) store a
retrieval task as a folder::

    corpus.jsonl           {"_id": str, "title": str, "text": str, ...} one document a line
    queries.jsonl          {"_id": str, "text": str, ...} one query a line
    qrels/<split>.tsv      query-id <TAB> corpus-id <TAB> score, after a header line; integer grades,
                           0 = judged non-relevant

Ids are strings. A document is embedded as MTEB embeds it, ``(title + " " + text).strip()``; a query as its
text. The task holds the split's queries that have judgements, in ``queries.jsonl`` order (MTEB evaluates
exactly those).

Every file is verified as it is read; each defect is one ``ValueError`` naming the file and line: a missing
file or split, an empty file, UTF-16/32 or NUL bytes, a line that is not a JSON object, a missing or
non-string id or text, a duplicate id, a qrels row without three columns, a non-integer grade, a judgement
given twice, or a qrels id that names no query or document.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrastlab.data.text_pairs import _decode

__all__ = ["RetrievalTask", "read_beir_task", "beir_splits", "is_beir_task", "holdout"]


@dataclass(frozen=True)
class RetrievalTask:
    """A retrieval task: documents, the split's judged queries and their graded judgements.

    Attributes:
        name: the task's name (its folder's name unless given).
        split: the qrels split the queries come from.
        doc_ids: ``(M,)`` document ids, in ``corpus.jsonl`` order.
        doc_texts: ``(M,)`` the text embedded for each document, ``(title + " " + text).strip()``.
        query_ids: ``(Q,)`` ids of the split's queries that have judgements, in ``queries.jsonl`` order.
        query_texts: ``(Q,)`` their texts.
        qrels: query id → document id → grade (an int; 0 or less is judged non-relevant), for every query of
            ``query_ids``.
        provenance: where the task came from: ``path``, ``split``, each file's ``sha256`` and the counts.
    """

    name: str
    split: str
    doc_ids: tuple[str, ...]
    doc_texts: tuple[str, ...]
    query_ids: tuple[str, ...]
    query_texts: tuple[str, ...]
    qrels: Mapping[str, Mapping[str, int]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def relevant(self, query_id: str) -> dict[str, int]:
        """The documents judged relevant to ``query_id`` (grade > 0), with their grades."""
        return {d: g for d, g in self.qrels[query_id].items() if g > 0}

    def doc_index(self) -> dict[str, int]:
        """Document id → its position in :attr:`doc_ids`."""
        return {d: i for i, d in enumerate(self.doc_ids)}

    @property
    def num_judgements(self) -> int:
        """Judgements over the task's queries, relevant or not."""
        return sum(len(v) for v in self.qrels.values())

    def fingerprint(self) -> str:
        """A SHA-256 over the documents, the queries and the judgements, in order: equal tasks, equal prints."""
        h = hashlib.sha256()
        for part in (self.doc_ids, self.doc_texts, self.query_ids, self.query_texts):
            h.update(json.dumps(part, ensure_ascii=False).encode())
        h.update(json.dumps({q: sorted(v.items()) for q, v in sorted(self.qrels.items())}).encode())
        return h.hexdigest()


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


def _jsonl(path: Path, text: str, fields: tuple[str, ...], optional: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Rows of a BEIR JSONL file: the string ``fields`` (required) and ``optional`` ones ('' when absent)."""
    rows: list[tuple[str, ...]] = []
    seen: dict[str, int] = {}
    for n, line in _lines(text):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"task: {path} line {n}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"task: {path} line {n}: not a JSON object")
        row = []
        for name in fields + optional:
            value = obj.get(name, "" if name in optional else None)
            if value is None and name in optional:
                value = ""
            if value is None:
                raise ValueError(f"task: {path} line {n}: no {name!r} field")
            if not isinstance(value, str):
                raise ValueError(f"task: {path} line {n}: {name!r} must be a string, got {type(value).__name__}")
            row.append(value)
        key = row[0]
        if not key:
            raise ValueError(f"task: {path} line {n}: empty '_id'")
        if key in seen:
            raise ValueError(f"task: {path} line {n}: duplicate id {key!r} (first on line {seen[key]})")
        seen[key] = n
        rows.append(tuple(row))
    return rows


def _qrels(path: Path, text: str) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]:
    """Query id → document id → grade from a BEIR qrels TSV (a header line first), and each judgement's line.

    A header alone gives no judgements: the split has no queries, which the caller refuses.
    """
    qrels: dict[str, dict[str, int]] = {}
    line_of: dict[tuple[str, str], int] = {}
    lines = list(_lines(text))
    header = lines[0][1].split("\t")
    if len(header) < 3 or header[2].strip().lstrip("-").isdigit():
        raise ValueError(
            f"task: {path} line {lines[0][0]}: expected a header (query-id, corpus-id, score), got {lines[0][1]!r}"
        )
    for n, line in lines[1:]:
        cells = line.split("\t")
        if len(cells) != 3:
            raise ValueError(f"task: {path} line {n}: expected 3 tab-separated columns, got {len(cells)}")
        q, d, s = (c.strip() for c in cells)
        if not q or not d:
            raise ValueError(f"task: {path} line {n}: empty query or corpus id")
        try:
            grade = int(s)
        except ValueError:
            raise ValueError(f"task: {path} line {n}: score {s!r} is not an integer grade") from None
        judged = qrels.setdefault(q, {})
        if d in judged:
            raise ValueError(f"task: {path} line {n}: query {q!r} judges document {d!r} twice")
        judged[d] = grade
        line_of[(q, d)] = n
    return qrels, line_of


def beir_splits(path: str | Path) -> list[str]:
    """The qrels splits of a BEIR folder (``qrels/<split>.tsv``), sorted; empty when there are none."""
    qdir = Path(path) / "qrels"
    return sorted(p.stem for p in qdir.glob("*.tsv")) if qdir.is_dir() else []


def is_beir_task(path: str | Path) -> bool:
    """Whether ``path`` is a folder with ``corpus.jsonl``, ``queries.jsonl`` and at least one qrels split."""
    p = Path(path)
    return (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file() and bool(beir_splits(p))


def read_beir_task(path: str | Path, split: str = "test", *, name: str | None = None) -> RetrievalTask:
    """Read and verify a BEIR-layout task folder.

    Args:
        path: the folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).
        split: which qrels split's queries and judgements to take.
        name: the task's name (default: the folder's name).

    Returns:
        The task, its queries those of ``split`` with judgements, in ``queries.jsonl`` order.

    Raises:
        ValueError: a missing folder, file or split, or a defect of a file's content, naming the file and line.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"task: {root} is not a folder (a BEIR task has corpus.jsonl, queries.jsonl, qrels/)")
    splits = beir_splits(root)
    if not isinstance(split, str) or split not in splits:
        raise ValueError(
            f"split: {split!r} is not a split of {root} (qrels/{split}.tsv is missing); "
            f"it has: {', '.join(splits) or 'no qrels/*.tsv'}"
        )
    texts = {f: _read(root / f) for f in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv")}
    corpus = _jsonl(root / "corpus.jsonl", texts["corpus.jsonl"][0], ("_id", "text"), ("title",))
    queries = _jsonl(root / "queries.jsonl", texts["queries.jsonl"][0], ("_id", "text"), ())
    qrels_path = root / "qrels" / f"{split}.tsv"
    qrels, line_of = _qrels(qrels_path, texts[f"qrels/{split}.tsv"][0])
    doc_ids = tuple(r[0] for r in corpus)
    known_docs = set(doc_ids)
    query_text = {r[0]: r[1] for r in queries}
    for q, judged in qrels.items():
        if q not in query_text:
            d = next(iter(judged))
            raise ValueError(
                f"task: {qrels_path} line {line_of[(q, d)]}: query id {q!r} is not in queries.jsonl "
                "(a query that exists only in the qrels)"
            )
        for d in judged:
            if d not in known_docs:
                raise ValueError(f"task: {qrels_path} line {line_of[(q, d)]}: corpus id {d!r} is not in corpus.jsonl")
    query_ids = tuple(r[0] for r in queries if r[0] in qrels)
    if not query_ids:  # every judged query is in queries.jsonl (checked above): the qrels hold no judgement
        raise ValueError(f"split: {split!r} of {root} has no queries: {qrels_path} has a header but no judgements")
    return RetrievalTask(
        name=name or root.resolve().name,
        split=split,
        doc_ids=doc_ids,
        doc_texts=tuple((r[2] + " " + r[1]).strip() for r in corpus),
        query_ids=query_ids,
        query_texts=tuple(query_text[q] for q in query_ids),
        qrels={q: dict(qrels[q]) for q in query_ids},
        provenance={
            "kind": "beir",
            "path": str(root.resolve()),
            "split": split,
            "sha256": {f: h for f, (_, h) in texts.items()},
            "documents": len(doc_ids),
            "queries": len(query_ids),
            "judgements": sum(len(v) for v in qrels.values()),
        },
    )


def _unit_hash(key: str, seed: int) -> float:
    """A number in [0, 1) from a SHA-256 of ``seed`` and ``key``: the same on every machine and Python."""
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def holdout(task: RetrievalTask, dev_fraction: float = 0.2, *, seed: int = 0) -> tuple[RetrievalTask, RetrievalTask]:
    """Split a task's queries into a train part and a dev part; both keep the whole corpus.

    A query goes to dev when a SHA-256 of ``seed`` and its id falls below ``dev_fraction``, so the split
    depends on nothing but the id (adding queries never moves another one) and is the same everywhere.

    Returns:
        ``(train, dev)``, named ``<name>/train-part`` and ``<name>/dev-part``.

    Raises:
        ValueError: ``dev_fraction`` outside (0, 1), or a part left without queries.
    """
    if isinstance(dev_fraction, bool) or not isinstance(dev_fraction, (int, float)) or not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction!r}")
    is_dev = [_unit_hash(q, seed) < dev_fraction for q in task.query_ids]
    parts = []
    for want, label in ((False, "train"), (True, "dev")):
        keep = [i for i, d in enumerate(is_dev) if d == want]
        if not keep:
            raise ValueError(f"dev_fraction: {dev_fraction} leaves the {label} part of {task.name} without queries")
        ids = tuple(task.query_ids[i] for i in keep)
        parts.append(
            RetrievalTask(
                name=f"{task.name}/{label}-part",
                split=task.split,
                doc_ids=task.doc_ids,
                doc_texts=task.doc_texts,
                query_ids=ids,
                query_texts=tuple(task.query_texts[i] for i in keep),
                qrels={q: task.qrels[q] for q in ids},
                provenance={
                    **task.provenance,
                    "part": label,
                    "dev_fraction": dev_fraction,
                    "holdout_seed": seed,
                    "queries": len(ids),
                },
            )
        )
    return parts[0], parts[1]
