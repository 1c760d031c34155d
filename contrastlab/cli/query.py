"""``contrastlab query STORE --queries FILE``: exact top-k (and log-partition) over an embedding store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command, load_matrix, one_line


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab query``."""
    from contrastlab.scale.cluster import add_engine_arguments

    p = add_command(
        sub,
        "query",
        help="exact top-k (and log-partition) over an embedding store, in one process or on Ray",
        description="Search every shard of an embedding store exactly and merge (score descending, id ascending).",
    )
    p.add_argument("store", help="embedding store folder")
    p.add_argument("--queries", required=True, help="(Q, D) .npy or .safetensors of query embeddings")
    p.add_argument("-k", type=int, default=10, help="results per query")
    p.add_argument(
        "--metric",
        choices=("cosine", "ip"),
        default="cosine",
        help="cosine (default): the queries are L2-normalised as the store's documents are, so raw model outputs "
        "and unit vectors give the same results (results.json: queries_normalised); ip: used as given",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="also the corpus-wide log-partition at this τ (of the normalised queries under cosine)",
    )
    p.add_argument("--exclude-self", action="store_true", help="queries are the store's rows 0..Q-1")
    p.add_argument("--model", default=None, help="refuse a store written by a model of another name")
    p.add_argument(
        "--out",
        default=None,
        help="results.json (ids, scores, log_partition, metric, queries_normalised, temperature); default: print",
    )
    add_engine_arguments(p)
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Search ``args.store`` for each query; print the first ten results or write them all to ``args.out``."""
    import numpy as np

    from contrastlab.io import write_json_atomic
    from contrastlab.scale.cluster import Engine
    from contrastlab.scale.sharded_search import query_store

    try:
        engine = Engine(args.engine, args.address)
        if args.out is not None and not args.out.endswith(".json"):
            raise ValueError(f"--out: {args.out} must end in .json")
        queries = np.asarray(load_matrix(args.queries, None, "--queries"))
        if queries.ndim != 2:
            raise ValueError(f"--queries: expected shape (Q, D), got {queries.shape} in {args.queries}")
        folder = Path(args.out).resolve().parent if args.out else Path.cwd()
        res, log_z = query_store(
            args.store,
            queries,
            args.k,
            engine=engine,
            temp_dir=folder,
            metric=args.metric,
            temperature=args.temperature,
            exclude_self=args.exclude_self,
            model=args.model,
        )
    except ValueError as e:  # bad input: the store's files, the model, the address, the queries
        msg = one_line(e)
        if msg.startswith("queries:"):
            msg = f"--queries {args.queries}:{msg.removeprefix('queries:')}"
        raise UsageError(f"query: {msg}") from None
    out: dict[str, Any] = {"ids": res.ids, "scores": res.scores}
    if log_z is not None:
        out["log_partition"] = log_z
    # what was done to the queries: under cosine they were L2-normalised as the store's documents are
    out["metric"] = args.metric
    out["queries_normalised"] = args.metric == "cosine"
    out["temperature"] = args.temperature
    if args.out is None:
        for i in range(min(10, res.ids.shape[0])):
            lz = "" if log_z is None else f"  log Z = {log_z[i]:.6f}"
            print(f"{i}: {' '.join(map(str, res.ids[i]))}{lz}")
    else:
        write_json_atomic(args.out, out)
        print(f"wrote top-{args.k} of {res.ids.shape[0]} queries to {args.out}")
    return EXIT_OK
