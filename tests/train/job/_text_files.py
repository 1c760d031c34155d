"""The files a tiny text job reads: a pairs file and the tiny sentence-transformers BERT beside it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.models.text_models import write_tiny_bert


def write_pairs(path: Path, rows: Sequence[Sequence[str]]) -> Path:
    """Write ``rows`` to ``path`` as tab-separated UTF-8 lines, one row a line, and return ``path``."""
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def bert_and_pairs(root: Path, rows: Sequence[Sequence[str]]) -> tuple[Path, Path]:
    """A tiny sentence-transformers BERT at ``root/st`` and the pairs file ``root/pairs.tsv`` of ``rows``."""
    return write_tiny_bert(root / "st", "st"), write_pairs(root / "pairs.tsv", rows)
