"""A real text corpus on every machine with Python: docstrings paired with the definitions they document.

A code-search task in the spirit of CodeSearchNet (Husain et al. 2019, arXiv 1909.09436): the *query*
is the first paragraph of a function's or class's docstring, the *positive* is what a programmer would
search for — the definition's qualified name and signature (``def json.dumps(obj, *, skipkeys=False,
...)``). The text comes from the source files of the Python standard library and, optionally, of
installed packages (numpy, scipy, torch, scikit-learn); nobody on this project wrote it, and nothing is
downloaded.

Built reproducibly at run time:

* the source files are read and parsed with :mod:`ast` — no module is ever imported (a package's
  location comes from :func:`importlib.util.find_spec` of its top-level name, which imports nothing);
* files are visited in sorted order; test folders (``test``, ``tests``, ``idle_test``), ``__pycache__``
  and ``site-packages`` are skipped, and so are private definitions and modules (a name starting
  with ``_``, such as ``_pyio`` or ``numpy._core``) unless asked for;
* a docstring's first paragraph is kept when it has at least ``min_words`` words;
* de-duplication: exact duplicates of (query, positive), then every definition whose *normalised*
  query (lower case, runs of non-alphanumerics to one space) or normalised positive was seen before,
  in sorted (source, qualified name) order — so ``"Return self==value."`` on a hundred classes
  becomes one pair, and no query has two right answers;
* the held-out split of a pair is a fixed function of its qualified name: the first 64 bits of
  SHA-256(``salt`` + qualified name) as a fraction in [0, 1) below ``test_fraction`` is ``test``,
  below ``test_fraction + valid_fraction`` is ``valid``, the rest ``train``. A definition keeps its
  split when the library around it changes;
* the provenance — Python version, package versions, per-source counts at every filter step, split
  sizes and a SHA-256 of the corpus itself — is returned with the pairs, for results.json.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import sysconfig
import tokenize
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contrastlab.data.text.pairs import TextPairs

__all__ = [
    "CODE_SOURCES",
    "SPLITS",
    "CodePair",
    "CodeCorpusConfig",
    "CodeCorpus",
    "build_code_corpus",
    "normalise_text",
    "split_of",
]

SPLITS = ("train", "valid", "test")

CODE_SOURCES: dict[str, str] = {
    "stdlib": "",
    "numpy": "numpy",
    "scipy": "scipy",
    "torch": "torch",
    "sklearn": "scikit-learn",
}
"""Known sources: name → the distribution whose version is recorded (``stdlib``: the Python version)."""

_SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "test", "tests", "idle_test"})


@dataclass(frozen=True)
class CodePair:
    """One documented definition.

    Attributes:
        query: the first paragraph of its docstring, whitespace collapsed to single spaces.
        positive: ``def``/``async def``/``class``, the qualified name and the signature (classes: bases).
        qualname: ``module.Class.method``.
        source: the source it came from (a key of :data:`CODE_SOURCES`).
        path: the file, relative to the source's root folder.
        line: the definition's line in that file.
        split: ``"train"``, ``"valid"`` or ``"test"`` (:func:`split_of` of ``qualname``).
    """

    query: str
    positive: str
    qualname: str
    source: str
    path: str
    line: int
    split: str


@dataclass(frozen=True)
class CodeCorpusConfig:
    """How the docstring corpus is built."""

    sources: tuple[str, ...] = ("stdlib",)
    """where the source files come from: any of stdlib, numpy, scipy, torch, sklearn (missing packages are skipped and recorded)"""
    test_fraction: float = 0.1
    """share of qualified names (by hash) in the test split"""
    valid_fraction: float = 0.1
    """share of qualified names (by hash) in the valid split"""
    min_words: int = 3
    """shortest docstring summary kept, in whitespace-separated words"""
    max_chars: int = 1000
    """longest docstring summary kept, in characters (longer ones are dropped, not cut)"""
    include_private: bool = False
    """keep definitions whose name, an enclosing class's or a module's name starts with an underscore"""
    salt: str = "contrastlab-code-corpus-v1"
    """prefix of the hashed qualified name; changing it redraws the splits"""

    def __post_init__(self) -> None:
        if not isinstance(self.sources, (tuple, list)) or not self.sources:
            raise ValueError(f"sources must be a non-empty tuple of names, got {self.sources!r}")
        unknown = [s for s in self.sources if s not in CODE_SOURCES]
        if unknown:
            raise ValueError(f"sources: unknown source(s) {unknown}; known: {', '.join(CODE_SOURCES)}")
        if len(set(self.sources)) != len(self.sources):
            raise ValueError(f"sources must not repeat a name, got {self.sources!r}")
        for name in ("test_fraction", "valid_fraction"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise ValueError(f"{name} must be a number in [0, 1), got {v!r}")
        if self.test_fraction + self.valid_fraction >= 1.0:
            raise ValueError(
                f"test_fraction + valid_fraction must be < 1, got {self.test_fraction} + {self.valid_fraction}"
            )
        for name in ("min_words", "max_chars"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")


@dataclass(frozen=True)
class CodeCorpus:
    """The de-duplicated pairs, in sorted (source, qualified name) order, and how they were made.

    Attributes:
        pairs: every kept pair.
        provenance: Python and package versions, counts at each step, split sizes, ``sha256``.
    """

    pairs: tuple[CodePair, ...]
    provenance: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.pairs)

    def split(self, name: str) -> tuple[CodePair, ...]:
        """The pairs of one split (``"train"``, ``"valid"``, ``"test"``) or ``"all"``."""
        if name == "all":
            return self.pairs
        if name not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)} or 'all', got {name!r}")
        return tuple(p for p in self.pairs if p.split == name)

    def text_pairs(self, split: str = "train") -> TextPairs:
        """The (query, positive) pairs of one split (or ``"all"``) as :class:`TextPairs`."""
        rows = tuple((p.query, p.positive) for p in self.split(split))
        return TextPairs(rows, ("query", "positive"), f"code-corpus/{split}")


def normalise_text(text: str) -> str:
    """Lower case, every run of non-alphanumeric characters to one space, stripped (for de-duplication)."""
    return re.sub(r"[\W_]+", " ", text.lower()).strip()


def split_of(qualname: str, *, test_fraction: float = 0.1, valid_fraction: float = 0.1, salt: str = "") -> str:
    """The split of a qualified name: the first 64 bits of SHA-256(salt + name) as a fraction in [0, 1).

    Below ``test_fraction`` is ``"test"``, below ``test_fraction + valid_fraction`` is ``"valid"``,
    otherwise ``"train"``.
    """
    h = int.from_bytes(hashlib.sha256((salt + qualname).encode("utf-8")).digest()[:8], "big") / 2.0**64
    if h < test_fraction:
        return "test"
    if h < test_fraction + valid_fraction:
        return "valid"
    return "train"


def _source_root(name: str) -> tuple[Path | None, str | None]:
    """(folder whose sub-paths are module names, version) of a source, without importing it."""
    if name == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"]), platform.python_version()
    spec = importlib.util.find_spec(name)  # a top-level name: finds the package, imports nothing
    if spec is None or not spec.submodule_search_locations:
        return None, None
    try:
        version: str | None = importlib.metadata.version(CODE_SOURCES[name])
    except importlib.metadata.PackageNotFoundError:
        version = None
    return Path(next(iter(spec.submodule_search_locations))).parent, version


def _python_files(root: Path, package: str | None) -> list[Path]:
    start = root / package if package else root
    found: list[Path] = []
    for folder, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        found.extend(Path(folder) / f for f in sorted(files) if f.endswith(".py") and not f.startswith("test_"))
    return found


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _summary(doc: str) -> str:
    """The docstring's first paragraph, whitespace collapsed."""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _positive(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, qualname: str) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in [*node.bases, *node.keywords])
        return f"class {qualname}({bases})" if bases else f"class {qualname}"
    kind = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    ret = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{kind} {qualname}({ast.unparse(node.args)}){ret}"


def _definitions(tree: ast.Module, module: str, private: bool) -> Iterator[tuple[str, str, str, int]]:
    """(qualified name, docstring, positive, line) of every documented def/class, nested in classes."""

    def visit(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, str, str, int]]:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_") and not private:
                continue
            qual = f"{prefix}.{node.name}"
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield qual, doc, _positive(node, qual), node.lineno
            if isinstance(node, ast.ClassDef):
                yield from visit(node.body, qual)

    yield from visit(tree.body, module)


def _parse(path: Path) -> ast.Module | None:
    """The module's syntax tree, or None for a file that is not Python this interpreter can parse.

    Deeply nested source makes CPython's parser give up with ``RecursionError`` or ``MemoryError``
    ("parser stack overflow"), not ``SyntaxError``; such a file is skipped like any unparsable one.
    """
    try:
        with tokenize.open(path) as f:  # honours the PEP 263 coding cookie
            text = f.read()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like in old files
            return ast.parse(text, filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError, RecursionError, MemoryError):
        return None


def build_code_corpus(config: CodeCorpusConfig | None = None, *, progress: bool = False) -> CodeCorpus:
    """Walk the sources, pair each documented definition's docstring with its signature, de-duplicate, split.

    Args:
        config: what to read and how to filter (default :class:`CodeCorpusConfig`: the standard library).
        progress: show a progress bar over the files.

    Returns:
        :class:`CodeCorpus` with its provenance.

    Raises:
        ValueError: no source could be found, or nothing survived the filters.

    Examples:
        >>> corpus = build_code_corpus()  # doctest: +SKIP
        >>> corpus.pairs[0].query, corpus.pairs[0].positive  # doctest: +SKIP
    """
    from contrastlab.search.index import _progress

    cfg = config or CodeCorpusConfig()
    sources: dict[str, dict[str, Any]] = {}
    rows: list[CodePair] = []
    plan: list[tuple[str, Path, list[Path]]] = []
    for name in cfg.sources:
        root, version = _source_root(name)
        if root is None:
            sources[name] = {"found": False, "version": None}
            continue
        files = _python_files(root, None if name == "stdlib" else name)
        plan.append((name, root, files))
        sources[name] = {
            "found": True,
            "version": version,
            "files": len(files),
            "unparsable_files": 0,
            "private_module_files": 0,
        }
    if not plan:
        raise ValueError(f"sources: none of {', '.join(cfg.sources)} is installed")
    bar = _progress(progress, "reading docstrings", sum(len(f) for _, _, f in plan))
    for name, root, files in plan:
        stats = sources[name]
        documented = too_short = too_long = 0
        for path in files:
            bar.advance(1)
            tree = _parse(path)
            if tree is None:
                stats["unparsable_files"] += 1
                continue
            rel = path.relative_to(root)
            module = _module_name(rel)
            if not cfg.include_private and any(part.startswith("_") for part in module.split(".")):
                stats["private_module_files"] += 1
                continue
            for qual, doc, pos, line in _definitions(tree, module, cfg.include_private):
                documented += 1
                query = _summary(doc)
                if len(query.split()) < cfg.min_words:
                    too_short += 1
                    continue
                if len(query) > cfg.max_chars:
                    too_long += 1
                    continue
                split = split_of(
                    qual, test_fraction=cfg.test_fraction, valid_fraction=cfg.valid_fraction, salt=cfg.salt
                )
                rows.append(CodePair(query, pos, qual, name, rel.as_posix(), line, split))
        stats.update(documented_definitions=documented, dropped_short=too_short, dropped_long=too_long)
    bar.close()

    rows.sort(key=lambda p: (cfg.sources.index(p.source), p.qualname, p.line))
    kept: list[CodePair] = []
    seen_exact: set[tuple[str, str]] = set()
    seen_query: set[str] = set()
    seen_positive: set[str] = set()
    exact = near_query = near_positive = 0
    for p in rows:
        if (p.query, p.positive) in seen_exact:
            exact += 1
            continue
        seen_exact.add((p.query, p.positive))
        nq, npos = normalise_text(p.query), normalise_text(p.positive)
        if nq in seen_query:
            near_query += 1
            continue
        if npos in seen_positive:
            near_positive += 1
            continue
        seen_query.add(nq)
        seen_positive.add(npos)
        kept.append(p)
    if not kept:
        raise ValueError("config: no documented definition passed the filters")
    for name in sources:
        if sources[name]["found"]:
            sources[name]["pairs"] = sum(p.source == name for p in kept)

    digest = hashlib.sha256()
    for p in kept:
        digest.update("\t".join((p.split, p.qualname, p.query, p.positive)).encode("utf-8") + b"\n")
    provenance = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "sources": sources,
        "candidates": len(rows),
        "duplicates_removed": {"exact": exact, "normalised_query": near_query, "normalised_positive": near_positive},
        "pairs": len(kept),
        "splits": {s: sum(p.split == s for p in kept) for s in SPLITS},
        "sha256": digest.hexdigest(),
        "config": asdict(cfg),
    }
    return CodeCorpus(pairs=tuple(kept), provenance=provenance)
