"""Overhead of encoding on Ray: a 2-actor Ray encode against one process with the same total threads.

Both sides run :func:`contrastlab.scale.encode.encode_corpus` on the same corpus file into a fresh store:
``local`` in this process with ``actors × threads-per-actor`` torch threads, ``ray`` on an embedded Ray
(started by the call, on 127.0.0.1) with ``actors`` actors of ``threads-per-actor`` threads each, every
actor loading the model once. Start-up is reported apart: the whole time of the same call on a corpus of
one document (corpus scan, model load; for Ray also the cluster start, the actors' start and their model
loads). The ratio compares the rest, the steady encoding (``total − start-up``); the target is
ray ≤ 1.5× local. The stores are checked to agree (ids exact, embeddings to float32 rounding).

The corpus is the documents of the docstring code corpus (the audit's default), repeated to ``--docs``
lines. Run with nothing else timing on the machine::

    python benchmarks/scale_encode.py --docs 20000
    python benchmarks/scale_encode.py --docs 64 --shard-rows 16     # a check that it runs
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from _common import machine, print_table, set_threads


def corpus_lines(n: int) -> list[str]:
    """``n`` documents of the docstring code corpus, cycled, one per line."""
    from contrastlab.data.text.code_corpus import build_code_corpus

    docs = [" ".join(p.positive.split()) for p in build_code_corpus().pairs]
    return [docs[i % len(docs)] for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    """Encode the corpus once per engine and print the table and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000, help="documents in the corpus")
    ap.add_argument("--model", default="minilm", help="what `contrastlab encode` takes")
    ap.add_argument("--shard-rows", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--threads-per-actor", type=int, default=1)
    ap.add_argument("--max-seq-length", type=int, default=128)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from contrastlab.audit.text_model import TextModelSource
    from contrastlab.scale.cluster import Engine
    from contrastlab.scale.encode import encode_corpus

    threads = args.actors * args.threads_per_actor
    set_threads(args.threads_per_actor)  # what the actors' worker processes inherit
    print(machine())
    source = TextModelSource(args.model, max_seq_length=args.max_seq_length)
    with tempfile.TemporaryDirectory(prefix="scale-encode-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(corpus_lines(args.docs)) + "\n")
        one = Path(tmp) / "one.txt"
        one.write_text(corpus_lines(1)[0] + "\n")
        kw = {"shard_rows": args.shard_rows, "batch_size": args.batch_size}
        ray_kw = {"engine": Engine("ray"), "actors": args.actors, "actor_threads": args.threads_per_actor}
        startup = {
            "local": encode_corpus(one, source, Path(tmp) / "local1", threads=threads, **kw).total_s,
            "ray": encode_corpus(one, source, Path(tmp) / "ray1", **ray_kw, **kw).total_s,
        }
        local = encode_corpus(corpus, source, Path(tmp) / "local", threads=threads, **kw)
        ray = encode_corpus(corpus, source, Path(tmp) / "ray", **ray_kw, **kw)
        ids_l, emb_l = local.store.read_all()
        ids_r, emb_r = ray.store.read_all()
        assert np.array_equal(ids_l, ids_r), "the stores' ids differ"
        diff = float(np.abs(emb_l - emb_r).max())
        scale = float(np.abs(emb_l).max())
    rows = []
    for name, r, how in (
        ("local", local, f"1 process, {threads} threads"),
        ("ray", ray, f"{args.actors} actors × {args.threads_per_actor} threads"),
    ):
        steady = r.total_s - startup[name]
        rows.append(
            [
                name,
                how,
                f"{startup[name]:.1f}",
                f"{steady:.1f}",
                f"{args.docs / steady:.0f}" if steady > 0 else "-",
                f"{r.total_s:.1f}",
            ]
        )
    print_table(
        f"encode {args.docs} documents, {args.model}, batch {args.batch_size}, shards of {args.shard_rows}",
        ["engine", "workers", "start-up s", "steady s", "docs/s steady", "total s"],
        rows,
    )
    ratio = (ray.total_s - startup["ray"]) / max(local.total_s - startup["local"], 1e-9)
    print(f"\nray / local steady time: {ratio:.2f}x (target <= 1.5x)")
    print(f"stores agree: ids identical, largest embedding difference {diff:.2e} of {scale:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
