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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrastlab.tasks.hub import hub_splits, is_hub_task, read_hub_parts
from contrastlab.tasks.records import _json_lines, _lines, _read, _records

__all__ = ["RetrievalTask", "read_beir_task", "beir_splits", "is_beir_task", "holdout", "task_folder", "tasks_under"]


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


def _jsonl(path: Path, text: str, fields: tuple[str, ...], optional: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Rows of a BEIR JSONL file: the string ``fields`` (required) and ``optional`` ones ('' when absent)."""
    return _records(path, _json_lines(path, text), fields, optional)


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
    """The qrels splits of a task folder, sorted; empty when there are none.

    ``qrels/<split>.tsv`` (BEIR), or the qrels files of a hub snapshot (:mod:`contrastlab.tasks.hub`) when
    there is no TSV.
    """
    qdir = Path(path) / "qrels"
    tsv = sorted(p.stem for p in qdir.glob("*.tsv")) if qdir.is_dir() else []
    if tsv:
        return tsv
    return hub_splits(path)


def _has_tsv_qrels(p: Path) -> bool:
    return (p / "qrels").is_dir() and any((p / "qrels").glob("*.tsv"))


def is_beir_task(path: str | Path) -> bool:
    """Whether ``path`` is a task folder, in BEIR's layout or MTEB's hub layout.

    BEIR: ``corpus.jsonl``, ``queries.jsonl`` and a ``qrels/<split>.tsv``; hub: ``corpus/``, ``queries/``,
    ``qrels/`` data files (:mod:`contrastlab.tasks.hub`).
    """
    p = Path(path)
    beir = (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file() and _has_tsv_qrels(p)
    return beir or is_hub_task(p)


def tasks_under(root: str | Path | None = None) -> list[Path]:
    """The task folders at ``root`` or one or two folders below it (``scifact``, ``cqadupstack/android``), sorted.

    A folder is a task when it is in BEIR's or MTEB's hub layout (:func:`is_beir_task`);
    hidden folders (a download's cache, an unfinished unpacking) are never tasks.

    Args:
        root: where to look (default ``$CONTRASTLAB_DATA`` or ``./data``).

    Returns:
        The task folders, ``root`` itself first when it is one; empty when ``root`` is not a folder.
    """
    from contrastlab.data.registry import default_data_root

    base = default_data_root() if root is None else Path(root).expanduser()
    if not base.is_dir():
        return []
    found = [base, *sorted(base.glob("*/")), *sorted(base.glob("*/*/"))]
    found = [p for p in found if not any(part.startswith(".") for part in p.relative_to(base).parts)]
    return [p for p in found if p.is_dir() and is_beir_task(p)]


def task_folder(path: str | Path, split: str = "test") -> Path:
    """The folder of a task and split, checked before anything is read: :func:`read_beir_task`'s first step.

    Args:
        path: a task folder, or the name of a task ``contrastlab data get`` fetched (looked up under the data
            root, :func:`contrastlab.tasks.resolve.resolve_task_path`).
        split: the qrels split that must be there.

    Returns:
        The folder.

    Raises:
        ValueError: a name not yet downloaded (naming the command that fetches it), a path that is not a
            folder, a folder without ``split``.
    """
    from contrastlab.tasks.resolve import resolve_task_path

    root = resolve_task_path(path)
    if not root.is_dir():
        raise ValueError(f"task: {root} is not a folder (a BEIR task has corpus.jsonl, queries.jsonl, qrels/)")
    splits = beir_splits(root)
    if not isinstance(split, str) or split not in splits:
        raise ValueError(
            f"split: {split!r} is not a split of {root} (qrels/{split}.tsv is missing); "
            f"it has: {', '.join(splits) or 'no qrels/*.tsv'}"
        )
    return root


def read_beir_task(path: str | Path, split: str = "test", *, name: str | None = None) -> RetrievalTask:
    """Read and verify a retrieval task folder: BEIR's layout, or a local snapshot of MTEB's hub layout.

    Args:
        path: the folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``; or ``corpus/``,
            ``queries/``, ``qrels/`` parquet or JSONL files as :mod:`contrastlab.tasks.hub` reads them), or the
            name of a task ``contrastlab data get`` fetched (``scifact``), looked up under the data root when no
            such path exists (:func:`contrastlab.tasks.resolve.resolve_task_path`).
        split: which qrels split's queries and judgements to take.
        name: the task's name (default: the folder's name).

    Returns:
        The task, its queries those of ``split`` with judgements, in ``queries.jsonl`` order.

    Raises:
        ValueError: a missing folder, file or split, or a defect of a file's content, naming the file and line;
            a task name not yet downloaded names the command that fetches it.
    """
    root = task_folder(path, split)
    if _has_tsv_qrels(root):  # BEIR's layout; without TSV qrels, a hub snapshot
        texts = {f: _read(root / f) for f in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv")}
        corpus = _jsonl(root / "corpus.jsonl", texts["corpus.jsonl"][0], ("_id", "text"), ("title",))
        queries = _jsonl(root / "queries.jsonl", texts["queries.jsonl"][0], ("_id", "text"), ())
        qrels_path = root / "qrels" / f"{split}.tsv"
        qrels, line_of = _qrels(qrels_path, texts[f"qrels/{split}.tsv"][0])
        where = {k: f"{qrels_path} line {n}" for k, n in line_of.items()}
        hashes = {f: h for f, (_, h) in texts.items()}
        kind, names = "beir", ("queries.jsonl", "corpus.jsonl")
    else:
        corpus, queries, qrels, where, qrels_path, hashes = read_hub_parts(root, split)
        kind, names = "mteb-hub", ("the queries", "the corpus")
    doc_ids = tuple(r[0] for r in corpus)
    known_docs = set(doc_ids)
    query_text = {r[0]: r[1] for r in queries}
    for q, judged in qrels.items():
        if q not in query_text:
            d = next(iter(judged))
            raise ValueError(
                f"task: {where[(q, d)]}: query id {q!r} is not in {names[0]} (a query that exists only in the qrels)"
            )
        for d in judged:
            if d not in known_docs:
                raise ValueError(f"task: {where[(q, d)]}: corpus id {d!r} is not in {names[1]}")
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
            "kind": kind,
            "path": str(root.resolve()),
            "split": split,
            "sha256": hashes,
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
