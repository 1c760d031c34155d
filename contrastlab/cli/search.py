"""``contrastlab search build | query | evaluate``: similarity search from the command line.

Embeddings, labels, ids and queries are read from ``.npy`` files (memory-mapped, never unpickled) or
``.safetensors`` files (``--key`` picks the tensor when there are several). Exit codes: 0 success, 2 bad
input (a usage error, a missing, empty, ill-shaped or corrupted file, an invalid value), 1 a failure while
running (faiss or the file system); errors are printed as one line.

Examples::

    contrastlab search build --embeddings corpus.npy --labels labels.npy --out corpus.index
    contrastlab search query --index corpus.index --queries q.npy -k 10 --out results.json
    contrastlab search evaluate --index corpus.index --queries q.npy --query-labels ql.npy -k 1,5,10
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable

import numpy as np

from contrastlab.cli._options import UsageError, load_matrix, one_line
from contrastlab.io import atomic_path, write_json_atomic
from contrastlab.search.evaluate import evaluate_retrieval
from contrastlab.search.index import EmbeddingIndex, _progress

__all__ = ["main"]

_PROG = "contrastlab search"
_CHUNK = 1 << 16  # rows per add() call while building (progress granularity)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _vector(path: str | None, key: str | None, name: str, n: int) -> np.ndarray | None:
    if path is None:
        return None
    arr = np.asarray(load_matrix(path, key, name))
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},), got {arr.shape} in {path}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integers, got dtype {arr.dtype} in {path}")
    return arr.astype(np.int64)


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,5,10, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return ks


def _array(p: argparse.ArgumentParser, flag: str, key: str, what: str, text: str, required: bool = False) -> None:
    """An option naming an array file, and its ``key`` option: the tensor of a ``.safetensors`` file of ``what``."""
    p.add_argument(flag, required=required, help=text)
    p.add_argument(key, default=None, help=f"tensor name inside a .safetensors {what} file")


def _parser() -> _Parser:
    parser = _Parser(prog=_PROG, description="Build, query and evaluate embedding indexes (faiss).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("build", help="build an index from a file of embeddings")
    _array(b, "--embeddings", "--key", "embeddings", "(N, D) .npy or .safetensors", required=True)
    _array(b, "--labels", "--labels-key", "labels", "(N,) integer labels, .npy or .safetensors")
    _array(b, "--ids", "--ids-key", "ids", "(N,) unique integer ids (default 0..N-1)")
    b.add_argument("--out", required=True, help="index directory to write")
    b.add_argument("--kind", choices=("flat", "ivf", "hnsw"), default="flat")
    b.add_argument("--metric", choices=("cosine", "ip"), default="cosine")
    b.add_argument("--nlist", type=int, default=None, help="IVF cells (default 4*sqrt(N))")
    b.add_argument("--nprobe", type=int, default=8, help="IVF cells visited per query")
    b.add_argument("--hnsw-m", type=int, default=32, help="HNSW links per node")
    b.add_argument("--ef-search", type=int, default=64, help="HNSW search candidates")
    b.add_argument("--seed", type=int, default=0, help="seed of the IVF training sample")

    q = sub.add_parser("query", help="top-k neighbours of each query")
    q.add_argument("--index", required=True, help="index directory")
    _array(q, "--queries", "--key", "queries", "(Q, D) .npy or .safetensors", required=True)
    q.add_argument("-k", type=int, default=10, help="neighbours per query")
    q.add_argument("--exclude-self", action="store_true", help="queries are corpus rows 0..Q-1: drop self matches")
    q.add_argument("--out", default=None, help="results.npy (ids, (Q, k) int64) or results.json (ids and scores)")

    e = sub.add_parser("evaluate", help="retrieval metrics of labelled queries against a labelled index")
    e.add_argument("--index", required=True, help="index directory (built with --labels)")
    _array(e, "--queries", "--key", "queries", "(Q, D) .npy or .safetensors", required=True)
    _array(e, "--query-labels", "--query-labels-key", "labels", "(Q,) integer labels, .npy or .safetensors", True)
    e.add_argument("-k", type=_parse_ks, default=(1, 5, 10), help="cut-offs, comma-separated (default 1,5,10)")
    e.add_argument("--exclude-self", action="store_true", help="queries are corpus rows 0..Q-1: drop self matches")
    e.add_argument("--no-r-metrics", action="store_true", help="skip MAP@R and R-precision (they search to depth R)")
    e.add_argument("--json", default=None, help="also write the metrics to this JSON file")
    for p in (b, q, e):
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def _build(a: argparse.Namespace) -> int:
    x = load_matrix(a.embeddings, a.key, "--embeddings")
    if x.ndim != 2:
        raise ValueError(f"--embeddings: expected shape (N, D), got {x.shape} in {a.embeddings}")
    n, d = x.shape
    if n == 0 or d == 0:
        raise ValueError(f"--embeddings: {a.embeddings} is empty (shape {x.shape}); an index needs at least one row")
    labels = _vector(a.labels, a.labels_key, "--labels", n)
    ids = _vector(a.ids, a.ids_key, "--ids", n)
    nlist = a.nlist
    if a.kind == "ivf" and nlist is None:
        nlist = int(min(max(1, round(4 * math.sqrt(n))), max(1, n // 39)))
    index = EmbeddingIndex(
        d, metric=a.metric, kind=a.kind, nlist=nlist, nprobe=a.nprobe, hnsw_m=a.hnsw_m, ef_search=a.ef_search
    )
    if a.kind == "ivf":  # train on a seeded random sample, not just the first chunk
        m = min(n, max(256 * (nlist or 1), 1 << 16))
        rows = np.sort(np.random.default_rng(a.seed).choice(n, size=m, replace=False))
        index.train(np.asarray(x[rows]))
    bar = _progress(not a.no_progress and sys.stderr.isatty(), "adding", n)
    for s in range(0, n, _CHUNK):
        e = min(s + _CHUNK, n)
        index.add(
            np.asarray(x[s:e]),
            ids=None if ids is None else ids[s:e],
            labels=None if labels is None else labels[s:e],
        )
        bar.advance(e - s)
    bar.close()
    index.save(a.out)
    print(f"built {a.kind} index of {n} x {d} ({a.metric}) at {a.out}")
    return 0


def _queries(a: argparse.Namespace, index: EmbeddingIndex) -> tuple[np.ndarray, np.ndarray | None]:
    xq = np.asarray(load_matrix(a.queries, a.key, "--queries"))
    if xq.ndim != 2:
        raise ValueError(f"--queries: expected shape (Q, D), got {xq.shape} in {a.queries}")
    if a.exclude_self and xq.shape[0] > index.ntotal:
        raise ValueError(f"--exclude-self: {xq.shape[0]} queries but the index holds only {index.ntotal} rows")
    return xq, (index.ids[: xq.shape[0]] if a.exclude_self else None)


def _print_table(title: str, columns: tuple[str, ...], rows: Iterable[tuple[str, ...]], right: str = "") -> None:
    """A table on stdout: ``columns`` (the one named ``right`` right-justified) and ``rows`` of their cells."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="right" if c == right else "left")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _query(a: argparse.Namespace) -> int:
    index = EmbeddingIndex.load(a.index)
    xq, excl = _queries(a, index)
    res = index.search(xq, a.k, exclude_ids=excl, progress=not a.no_progress and sys.stderr.isatty())
    if a.out is None:
        n = min(10, xq.shape[0])
        rows = ((str(i), " ".join(map(str, res.ids[i])), " ".join(f"{s:.4f}" for s in res.scores[i])) for i in range(n))
        _print_table(f"top-{a.k} ids (first {n} of {xq.shape[0]} queries)", ("query", "ids", "scores"), rows)
    elif a.out.endswith(".npy"):
        with atomic_path(a.out) as tmp, open(tmp, "wb") as f:
            np.save(f, res.ids, allow_pickle=False)
    elif a.out.endswith(".json"):
        out = {"ids": res.ids, "scores": res.scores}
        if res.labels is not None:
            out["labels"] = res.labels
        write_json_atomic(a.out, out)
    else:
        raise ValueError(f"--out: {a.out} must end in .npy or .json")
    if a.out is not None:
        print(f"wrote top-{a.k} of {xq.shape[0]} queries to {a.out}")
    return 0


def _evaluate(a: argparse.Namespace) -> int:
    index = EmbeddingIndex.load(a.index)
    xq, excl = _queries(a, index)
    ql = _vector(a.query_labels, a.query_labels_key, "--query-labels", xq.shape[0])
    assert ql is not None
    metrics = evaluate_retrieval(
        index,
        xq,
        ql,
        ks=a.k,
        query_ids=excl,
        r_metrics=not a.no_r_metrics,
        progress=not a.no_progress and sys.stderr.isatty(),
    )
    rows = ((k, str(int(v)) if k.startswith(("num_", "depth")) else f"{v:.4f}") for k, v in metrics.items())
    title = f"retrieval metrics ({int(metrics['num_queries'])} queries, index {a.index})"
    _print_table(title, ("metric", "value"), rows, right="value")
    if a.json is not None:
        write_json_atomic(a.json, metrics)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``contrastlab search`` with ``argv`` (without the program name) and return the exit code.

    Args:
        argv: e.g. ``["build", "--embeddings", "x.npy", "--out", "idx"]``; ``sys.argv[1:]`` when None.

    Returns:
        0 on success, 2 on bad input (arguments or files), 1 on a failure while running.
    """
    try:
        a = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"{_PROG}: usage error: {e} (see --help)", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    try:
        return {"build": _build, "query": _query, "evaluate": _evaluate}[a.command](a)
    except (ValueError, TypeError, FileNotFoundError) as e:  # bad input; IndexFormatError is a ValueError
        print(f"{_PROG}: error: {one_line(e)}", file=sys.stderr)  # one line
        return 2
    except (OSError, RuntimeError) as e:
        print(f"{_PROG}: failed: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
