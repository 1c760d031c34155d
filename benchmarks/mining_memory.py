"""Peak memory of hard-negative mining at 100,000 anchors × 1,000,000 corpus items.

Builds a random corpus of ``--items`` unit vectors (D = ``--dim``, around 1,000 centres so that
neighbours are meaningful), an IVF :class:`~contrastlab.search.EmbeddingIndex` over it, and
``--anchors`` anchors near their positives (corpus rows), then mines ``--k`` negatives per anchor with
the margin filter and reports the resident set size after building (baseline), the peak during
mining (``ru_maxrss``) and the time. A second, smaller run (``--prob-anchors``) adds the
softmax-search probability filter, whose exact log-partition streams the whole corpus per anchor.
The N × M similarity matrix, which the miner never forms, would take N·M·4 bytes.

Usage:
    python benchmarks/mining_memory.py
    python benchmarks/mining_memory.py --items 100000 --anchors 10000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Build the corpus and index, mine, print one markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1_000_000, help="corpus size M")
    ap.add_argument("--anchors", type=int, default=100_000, help="anchors N (margin filter only)")
    ap.add_argument("--prob-anchors", type=int, default=1_000, help="anchors of the run with the probability filter")
    ap.add_argument("--dim", type=int, default=32, help="embedding dimension D")
    ap.add_argument("--k", type=int, default=16, help="negatives per anchor")
    ap.add_argument("--nlist", type=int, default=1024, help="IVF cells")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch and faiss threads")
    args = ap.parse_args(argv)
    C.set_threads(args.threads)
    import faiss
    import torch

    from contrastlab.search import EmbeddingIndex, mine_hard_negatives

    faiss.omp_set_num_threads(args.threads)
    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/mining_memory.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((1000, args.dim)).astype(np.float32)
    corpus = np.empty((args.items, args.dim), dtype=np.float32)
    for s in range(0, args.items, 100_000):  # generated in slices: no temporary copy of the whole corpus
        e = min(s + 100_000, args.items)
        corpus[s:e] = centres[rng.integers(0, 1000, e - s)] + 0.5 * rng.standard_normal((e - s, args.dim))
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    pos = rng.choice(args.items, size=args.anchors, replace=False)
    anchors = corpus[pos] + 0.1 * rng.standard_normal((args.anchors, args.dim)).astype(np.float32)
    t0 = time.perf_counter()
    index = EmbeddingIndex(args.dim, kind="ivf", nlist=args.nlist, nprobe=8)
    index.add(corpus)
    t_build = time.perf_counter() - t0
    baseline = C.current_rss_bytes()
    rows = []
    for n, prob in ((args.anchors, None), (args.prob_anchors, 0.05)):
        t0 = time.perf_counter()
        mined = mine_hard_negatives(
            index, anchors[:n], corpus[pos[:n]], num_negatives=args.k, exclude_ids=pos[:n], margin=0.0,
            max_probability=prob, temperature=0.05, batch_size=4096,
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        peak = C.peak_rss_bytes()
        rows.append([
            f"{n:,} × {args.items:,}", "margin" + (f" + P ≤ {prob}" if prob else ""), C.fmt_bytes(baseline),
            f"{C.fmt_bytes(peak)} (+{C.fmt_bytes(peak - baseline)})", C.fmt_bytes(4.0 * n * args.items),
            f"{mined.complete.mean():.3f}", C.fmt_time(seconds),
        ])  # fmt: skip
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
        del mined
    torch.set_num_threads(args.threads)
    C.print_table(
        f"Hard-negative mining, D = {args.dim}, K = {args.k}, IVF (nlist {args.nlist}, nprobe 8; built in "
        f"{t_build:.0f} s), {args.threads} threads: RSS after building corpus, anchors and index; peak RSS while "
        "mining (process-wide, so the second row's peak includes the first's); the N × M float32 similarity matrix "
        "never formed",
        ["anchors × items", "filters", "RSS before", "peak RSS", "N × M × 4 B", "complete", "time"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
