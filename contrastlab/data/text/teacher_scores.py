"""A teacher's scores of a pairs file's rows: the targets of the distillation losses, as a verified file.

``margin_mse`` and ``distill_kl`` (:mod:`contrastlab.losses`) fit the student to a teacher's scores of each
anchor's positive and negatives. ``contrastlab mine --teacher MODEL`` writes them beside the mined pairs
file ``OUT`` as ``OUT.teacher.jsonl`` (:func:`scores_path`); ``contrastlab train`` reads them with the
pairs (``data.text.teacher_scores``). The file is JSON Lines, each line checked by its own SHA-256
(:func:`contrastlab.io.dumps_json_checked`): a header ``{"teacher", "rows", "candidates"}``, then one line
per pairs row, ``{"id", "scores"}``, where ``scores`` is the teacher's ``1 + K`` scores (positive first)
and ``id`` the hash of the row's texts (:func:`row_id`). Reading checks the count and every id against
the pairs file, so scores written for another file, or for the same file re-ordered or re-mined, are
refused, naming the line.

The teacher's score is the cosine similarity of its embeddings (:func:`score_rows`), the similarity a
sentence-transformers bi-encoder such as all-mpnet-base-v2 is trained with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "SUFFIX",
    "scores_path",
    "row_id",
    "score_rows",
    "write_teacher_scores",
    "read_teacher_scores",
    "read_teacher_scores_file",
]

SUFFIX = ".teacher.jsonl"
"""The suffix ``contrastlab mine --teacher`` appends to the pairs file's name."""


def scores_path(pairs_file: str | Path) -> Path:
    """Where the teacher's scores of ``pairs_file`` go: ``pairs_file`` + :data:`SUFFIX`."""
    p = Path(pairs_file)
    return p.with_name(p.name + SUFFIX)


def row_id(row: Sequence[str]) -> str:
    """The first 16 hex digits of the SHA-256 of the row's texts joined by the unit separator U+001F."""
    return hashlib.sha256("\x1f".join(row).encode("utf-8")).hexdigest()[:16]


def score_rows(
    embed: Callable[[list[str]], Tensor], rows: Sequence[Sequence[str]], *, batch_size: int = 64
) -> np.ndarray:
    """The teacher's cosine scores of each row's candidates (its positive, then its negatives).

    Every distinct text is embedded once, in blocks of ``batch_size``.

    Args:
        embed: the teacher, ``texts -> (len(texts), D)`` embeddings.
        rows: ``(anchor, positive, negative_1, …, negative_K)`` rows, all with the same K.
        batch_size: texts per call of ``embed``.

    Returns:
        ``(R, 1 + K)`` float32 cosine similarities.

    Raises:
        ValueError: rows of different lengths, or fewer than 2 texts.
    """
    widths = {len(r) for r in rows}
    if len(widths) != 1 or min(widths) < 2:
        raise ValueError(f"rows must all hold an anchor and 1 + K candidates, got lengths {sorted(widths)}")
    index: dict[str, int] = {}
    for r in rows:
        for t in r:
            index.setdefault(t, len(index))
    texts = list(index)
    with torch.no_grad():
        emb = torch.cat([embed(texts[i : i + batch_size]).float().cpu() for i in range(0, len(texts), batch_size)])
    emb = torch.nn.functional.normalize(emb, dim=1)
    ids = torch.tensor([[index[t] for t in r] for r in rows], dtype=torch.int64)  # (R, 2 + K)
    anchors, cands = emb[ids[:, 0]], emb[ids[:, 1:]]  # (R, D), (R, 1 + K, D)
    return torch.einsum("rd,rcd->rc", anchors, cands).numpy().astype(np.float32)


def write_teacher_scores(path: str | Path, rows: Sequence[Sequence[str]], scores: np.ndarray, teacher: str) -> Path:
    """Write ``scores`` (``(R, 1 + K)``) of ``rows`` to ``path`` atomically, one checked JSON line per row."""
    from contrastlab.io import dumps_json_checked, write_text_atomic

    if scores.ndim != 2 or scores.shape[0] != len(rows):
        raise ValueError(f"scores must have one row per pairs row ({len(rows)}), got shape {scores.shape}")
    lines = [dumps_json_checked({"teacher": teacher, "rows": len(rows), "candidates": int(scores.shape[1])}, line=True)]
    lines += [
        dumps_json_checked({"id": row_id(r), "scores": [float(x) for x in s]}, line=True)
        for r, s in zip(rows, scores, strict=True)
    ]
    write_text_atomic(Path(path), "\n".join(lines) + "\n")
    return Path(path)


def read_teacher_scores(path: str | Path, rows: Sequence[Sequence[str]]) -> np.ndarray:
    """The ``(R, 1 + K)`` scores of ``rows`` from ``path``, checked against them.

    Raises:
        ValueError: starting with ``path``: a missing or corrupt file, a count, width or id that does not
            match ``rows`` (the line named), a non-finite score.
    """
    return read_teacher_scores_file(path, rows)[0]


def read_teacher_scores_file(path: str | Path, rows: Sequence[Sequence[str]]) -> tuple[np.ndarray, dict[str, str]]:
    """:func:`read_teacher_scores`, and what a model card names of the file read.

    Returns:
        ``(scores, provenance)``: the ``(R, 1 + K)`` scores and ``{"path", "teacher", "sha256"}`` — the
        teacher its header names and the SHA-256 of the bytes these scores were read from.

    Raises:
        ValueError: as :func:`read_teacher_scores`.
    """
    from contrastlab.io import CorruptFileError, loads_json_verified

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p} does not exist")
    data = p.read_bytes()
    lines = data.splitlines()
    try:
        records = [loads_json_verified(line, f"{p}:{i + 1}") for i, line in enumerate(lines)]
    except (CorruptFileError, ValueError) as e:
        raise ValueError(
            f"{' '.join(str(e).split())} (not a teacher scores file of contrastlab mine --teacher?)"
        ) from None
    if not records or not isinstance(records[0], dict) or "rows" not in records[0]:
        raise ValueError(f"{p}: line 1 is not a teacher scores header")
    width = len(rows[0]) - 1 if rows else 0
    if len(records) - 1 != len(rows):
        raise ValueError(f"{p} holds scores of {len(records) - 1} rows, the pairs file has {len(rows)}")
    if width < 2:
        raise ValueError(f"{p}: the pairs file has no negative columns; distillation needs 1 + K >= 2 candidates")
    out = np.empty((len(rows), width), dtype=np.float32)
    for i, (rec, row) in enumerate(zip(records[1:], rows, strict=True)):
        line = i + 2
        if not isinstance(rec, dict) or rec.get("id") != row_id(row):
            raise ValueError(
                f"{p}: line {line}: id {rec.get('id') if isinstance(rec, dict) else None!r} is not the id of pairs "
                f"row {i + 1} ({row_id(row)}); the scores were written for another pairs file"
            )
        s = rec.get("scores")
        if not isinstance(s, list) or len(s) != width:
            raise ValueError(f"{p}: line {line}: scores must hold {width} numbers (positive, then negatives)")
        out[i] = s
    if not np.isfinite(out).all():
        raise ValueError(f"{p}: contains NaN or Inf scores")
    provenance = {
        "path": str(path),
        "teacher": str(records[0].get("teacher")),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    return out, provenance
