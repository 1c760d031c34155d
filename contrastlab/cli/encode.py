"""``contrastlab encode MODEL --corpus FILE|DIR --out STORE``: a text corpus into an embedding store."""

from __future__ import annotations

import argparse
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command, one_line


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab encode``."""
    from contrastlab.scale.cluster import add_engine_arguments
    from contrastlab.scale.encode import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_ROWS

    p = add_command(
        sub,
        "encode",
        help="encode a text corpus into an embedding store (one process or Ray)",
        description="Encode every document of a corpus with a text model into an embedding store: shards of "
        "row ids and embeddings with a checksummed manifest. Re-running an interrupted encode keeps the "
        "finished shards. Corpus: a UTF-8 FILE with one document per line, or a DIR whose *.txt files (sorted "
        "by name) are one document each; a document's id is its position.",
    )
    p.add_argument(
        "model", help="minilm, a sentence-transformers/Hugging Face folder or cached name, or a contrastlab text run"
    )
    p.add_argument("--corpus", required=True, metavar="FILE|DIR", help="the documents (see above)")
    p.add_argument("--out", required=True, metavar="STORE", help="the store folder (new, or an interrupted encode)")
    add_engine_arguments(p)
    p.add_argument("--shard-rows", type=int, default=DEFAULT_SHARD_ROWS, help="rows per shard")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="texts per forward pass")
    p.add_argument("--actors", type=int, default=2, help="Ray actors, each loading the model once (--engine ray)")
    p.add_argument(
        "--max-seq-length",
        type=int,
        default=0,
        help="tokens per text (longer ones are truncated; default 0: the model's own max_seq_length, as audit)",
    )
    p.add_argument(
        "--prompt",
        default=None,
        help='put before every text, e.g. "passage: " (default: the prompt the model records under --prompt-name: '
        "a contrastlab run or its model folder, a sentence-transformers folder; none if it records none)",
    )
    p.add_argument(
        "--prompt-name",
        choices=("document", "query"),
        default="document",
        help="which recorded prompt to use when --prompt is not given: document (a corpus, the default) or query "
        "(a file of queries; audit's query_prompt)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Encode ``args.corpus`` with ``args.model`` into the store ``args.out``; keep the shards already written."""
    from contrastlab.audit.text_model import TextModelSource
    from contrastlab.scale.cluster import Engine
    from contrastlab.scale.corpus import TextCorpus
    from contrastlab.scale.encode import default_task_rows, encode_corpus
    from contrastlab.search.index import _progress
    from contrastlab.search.store import StoreError

    for flag, value in (
        ("--shard-rows", args.shard_rows),
        ("--batch-size", args.batch_size),
        ("--actors", args.actors),
    ):
        if value < 1:
            raise UsageError(f"encode: {flag} must be at least 1, got {value}")
    if args.max_seq_length < 0:
        raise UsageError(f"encode: --max-seq-length must be at least 0 (0: the model's own), got {args.max_seq_length}")
    try:
        engine = Engine(args.engine, args.address)
        # the corpus fails before the model loads
        corpus = TextCorpus.scan(args.corpus, stride=default_task_rows(args.shard_rows, args.batch_size))
    except ValueError as e:
        flag = "" if str(e).startswith(("--address", "engine")) else "--corpus "
        raise UsageError(f"encode: {flag}{one_line(e)}") from None
    bar = _progress(not args.quiet, "encoding shards", -(-corpus.count // args.shard_rows))
    try:
        result = encode_corpus(
            corpus,
            TextModelSource(
                args.model, max_seq_length=args.max_seq_length, prompt=args.prompt, prompt_name=args.prompt_name
            ),
            args.out,
            engine=engine,
            shard_rows=args.shard_rows,
            batch_size=args.batch_size,
            actors=args.actors,
            on_shard=lambda i, rec: bar.advance(1),
        )
    except StoreError as e:
        raise UsageError(f"encode: --out {one_line(e)}") from None
    except ValueError as e:  # the model, the engine: the message names the argument
        raise UsageError(f"encode: {one_line(e)}") from None
    finally:
        bar.close()
    store = result.store
    print(
        f"{store.count} documents, {len(store.shards)} shards of {store.dim}-dimensional {store.dtype} embeddings "
        f"({len(result.written)} encoded, {len(result.skipped)} kept from an interrupted run) in "
        f"{result.total_s:.1f} s on {result.engine}"
    )
    if store.model.get("prompt"):
        print(f"prompt: {store.model['prompt']!r} before every text")
    print(f"store: {store.path}")
    return EXIT_OK
