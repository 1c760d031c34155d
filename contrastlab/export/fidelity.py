"""How close a quantized export's embeddings are to the float32 export's, on text no test or corpus uses.

The text is prose from the Python standard library's docstrings that the code corpus
(:mod:`contrastlab.data.text.code_corpus`, the audit's and the benchmarks' default text) never reads: every
paragraph of a module's docstring, and the paragraphs *after the first* of a function's or class's
docstring (the corpus keeps only the first, as its queries). Paragraphs with code (``>>>`` or indented
lines) are skipped; those of ``min_words`` to ``max_words`` words are kept once each, whitespace
collapsed, and ordered by the SHA-256 of their text, so that the first ``n`` are a fixed, well-mixed
sample that does not depend on the order of the files.

:func:`export_cosines` encodes the same texts with two exports (in the audit's length-sorted batches)
and returns each text's cosine between the two served embeddings.
"""

from __future__ import annotations

import ast
import hashlib
import sysconfig
from pathlib import Path

import numpy as np

from contrastlab.data.text.code_corpus import _module_name, _parse, _python_files
from contrastlab.export.runtime import OnnxTextEncoder

__all__ = ["docstring_paragraphs", "export_cosines"]


def _prose(paragraph: str) -> bool:
    return ">>>" not in paragraph and not any(line.startswith((" ", "\t")) for line in paragraph.splitlines())


def docstring_paragraphs(n: int, *, min_words: int = 20, max_words: int = 200) -> list[str]:
    """The first ``n`` standard-library docstring paragraphs the code corpus never uses (see the module).

    Raises:
        ValueError: ``n``, ``min_words`` or ``max_words`` is not a positive int, ``min_words > max_words``,
            or the standard library holds fewer than ``n`` such paragraphs (naming ``n``).
    """
    for name, v in (("n", n), ("min_words", min_words), ("max_words", max_words)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if min_words > max_words:
        raise ValueError(f"min_words ({min_words}) must not exceed max_words ({max_words})")
    root = Path(sysconfig.get_paths()["stdlib"])
    kept: dict[str, str] = {}  # text -> its SHA-256
    for path in _python_files(root, None):
        if any(part.startswith("_") for part in _module_name(path.relative_to(root)).split(".")):
            continue  # private modules, as the code corpus skips them
        tree = _parse(path)
        if tree is None:
            continue
        module_doc = ast.get_docstring(tree, clean=True) or ""
        docs = [module_doc.split("\n\n")]
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    docs.append(doc.split("\n\n")[1:])  # the first paragraph is the code corpus's query
        for paragraph in (p for paragraphs in docs for p in paragraphs):
            text = " ".join(paragraph.split())
            if _prose(paragraph) and min_words <= len(text.split()) <= max_words:
                kept.setdefault(text, hashlib.sha256(text.encode("utf-8")).hexdigest())
    if len(kept) < n:
        raise ValueError(f"n: the standard library has {len(kept)} such paragraphs, fewer than {n}")
    return [text for text, _ in sorted(kept.items(), key=lambda item: (item[1], item[0]))[:n]]


def export_cosines(
    reference: OnnxTextEncoder, other: OnnxTextEncoder, texts: list[str], *, batch_size: int = 32
) -> np.ndarray:
    """Cosine between the two exports' embeddings of each text: ``(len(texts),)`` float64.

    Both encode the same length-sorted batches of ``batch_size`` texts (the audit's order); the cosine is
    taken in float64 between the raw (pre-normalisation) embeddings, so it does not depend on whether
    the exports normalise.

    Raises:
        ValueError: no texts, a ``batch_size`` that is not a positive int, exports of different widths, or
            a zero embedding (whose cosine is undefined).
    """
    if not texts:
        raise ValueError("texts: no text to compare on")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if reference.dim != other.dim:
        raise ValueError(f"other: gives {other.dim}-dimensional embeddings, the reference {reference.dim}")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    a = np.empty((len(texts), reference.dim))
    b = np.empty((len(texts), other.dim))
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        batch = [texts[i] for i in idx]
        a[idx] = reference.run_texts(batch)[1]
        b[idx] = other.run_texts(batch)[1]
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    if not np.all(norms > 0):
        raise ValueError(f"texts: text {int(np.argmin(norms))} has a zero embedding; its cosine is undefined")
    cos: np.ndarray = (a * b).sum(1) / norms
    return cos
