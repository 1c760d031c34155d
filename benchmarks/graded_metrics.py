"""Graded retrieval metrics over many queries: contrastlab.search.graded against pytrec_eval (trec_eval).

A synthetic run of Q queries × K results over M documents (distinct documents per query, each row sorted by
score as a search returns it) and graded judgements (1–5 judged documents per query, grades 0–2, one of them
retrieved). Two kinds of scores:

* ``float32``: cosine-like float32 values, as a dense retriever's search returns them (ties are rare);
* ``grid``: 1,000 possible values, so about a third of neighbouring results tie (a worst case for the
  trec_eval ordering of ties, which sorts each run of equal scores by document id).

Both tools compute nDCG@10, MAP@100, recall@100, P@10 and the reciprocal rank of every query:

* pytrec_eval: ``RelevanceEvaluator(qrels, measures)`` built once (not timed), then ``evaluate(run)`` on the
  run as the dictionaries it takes (built beforehand, not timed: its best case);
* contrastlab: the judgements as arrays and the corpus's tie keys prepared once (not timed, the analogue of
  the evaluator; their time is printed), then :func:`~contrastlab.search.graded.graded_metrics` on the
  ``(Q, K)`` arrays of ids and scores, the ordering of ties included.

Prints each one's time (best of ``--repeats``), the ratio, the largest difference between the two, the CPU
model and the load average.

    python benchmarks/graded_metrics.py --queries 10000 --depth 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import machine, set_threads

MEASURES = ["ndcg_cut.10", "map_cut.100", "recall.100", "P.10", "recip_rank"]


def make_case(q: int, k: int, m: int, seed: int, kind: str):
    """(ids (Q, K), scores (Q, K), doc ids, qrels dict, run dict)."""
    rng = np.random.default_rng(seed)
    offset = rng.integers(0, m, size=(q, 1))
    stride = 2 * rng.integers(0, m // 2, size=(q, 1)) + 1  # odd: coprime with m = 2^p, so a row never repeats
    ids = (offset + stride * np.arange(k)) % m
    raw = rng.random((q, k)) if kind == "grid" else rng.normal(0.3, 0.1, size=(q, k)).astype(np.float32)
    values = np.round(raw, 3) if kind == "grid" else raw.astype(np.float64)
    scores = -np.sort(-values, axis=1)
    doc_ids = [f"doc{j}" for j in range(m)]
    qrels = {}
    for i in range(q):
        judged = rng.choice(m, size=int(rng.integers(1, 6)), replace=False)
        judged[0] = ids[i, int(rng.integers(0, k))]  # at least one judged document is retrieved
        qrels[f"q{i}"] = {doc_ids[j]: int(rng.integers(0, 3)) for j in np.unique(judged)}
    run = {f"q{i}": {doc_ids[j]: float(s) for j, s in zip(ids[i], scores[i], strict=True)} for i in range(q)}
    return ids, scores, doc_ids, qrels, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=1_000)
    ap.add_argument("--documents", type=int, default=1 << 17, help="a power of two")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    set_threads(args.threads)
    import pytrec_eval

    from contrastlab.search.graded import graded_metrics, judgements, tie_keys

    print(machine())
    print(f"load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    report = {}
    for kind in ("float32", "grid"):
        ids, scores, doc_ids, qrels, run = make_case(args.queries, args.depth, args.documents, 0, kind)
        qids = list(qrels)
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES))
        t = time.perf_counter()
        judged = judgements(qrels, qids, doc_ids)
        ties = tie_keys(doc_ids)
        prep = time.perf_counter() - t
        times: dict[str, list[float]] = {"contrastlab": [], "pytrec_eval": []}
        ours = theirs = None
        for _ in range(args.repeats):
            t = time.perf_counter()
            ours = graded_metrics(ids, judged, MEASURES, scores=scores, ties=ties)
            times["contrastlab"].append(time.perf_counter() - t)
            t = time.perf_counter()
            theirs = evaluator.evaluate(run)
            times["pytrec_eval"].append(time.perf_counter() - t)
        assert ours is not None and theirs is not None
        worst = max(
            float(np.max(np.abs(ours[key] - np.array([theirs[q][key] for q in qids]))))
            for key in ("ndcg_cut_10", "map_cut_100", "recall_100", "P_10", "recip_rank")
        )
        equal = float(np.mean(scores[:, 1:] == scores[:, :-1]))
        best = {k: min(v) for k, v in times.items()}
        ratio = best["pytrec_eval"] / best["contrastlab"]
        print(
            f"{kind} scores ({100 * equal:.1f}% of neighbours tie): {args.queries:,} queries × {args.depth:,} results, "
            f"{len(MEASURES)} measures, best of {args.repeats}:"
        )
        print(
            f"  contrastlab  {best['contrastlab']:.3f} s   (all: {', '.join(f'{t:.3f}' for t in times['contrastlab'])}; "
            f"judgements and tie keys prepared once: {prep:.3f} s)"
        )
        print(
            f"  pytrec_eval  {best['pytrec_eval']:.3f} s   (all: {', '.join(f'{t:.3f}' for t in times['pytrec_eval'])})"
        )
        print(f"  contrastlab is {ratio:.1f}× faster (target ≥ 10×); largest per-query difference {worst:.1e}")
        report[kind] = {"seconds": best, "all": times, "prepare_s": prep, "speedup": ratio, "max_abs_diff": worst}
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if args.json:
        args.json.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
