"""The effect of keeping false negatives out of the batch, on SciFact's dev split held out of training.

MiniLM (the bundled all-MiniLM-L6-v2) is fine-tuned by ``contrastlab train`` on the train part of
``holdout(read_beir_task(SCIFACT, "train"), dev_fraction=0.2, seed=0)`` — one pair (claim, abstract) per
relevant abstract — twice per seed, with the same budget and seed: ``data.text.false_negatives: sampler``
(no batch holds the same text twice or a query's other relevant abstract) and ``off`` (plain shuffled
batches). Each model is then scored on the dev part (every dev query against the whole 5,183-abstract
corpus) by trec_eval's nDCG@10 (:mod:`contrastlab.search.graded`), and the per-query paired difference
``sampler − off`` (averaged over the seeds) is reported with its 95% percentile-bootstrap interval
(:func:`contrastlab.eval.bootstrap.bootstrap_mean`, 10,000 resamples). The base model's score is given for
reference. SciFact is CC BY-NC and is read from the shared folder; nothing of it is written to the repo.
``benchmarks/scifact_finetune.py --with-off`` makes the same comparison through ``contrastlab audit --task`` and
``contrastlab compare``; this script is the short one (no audit, nDCG@10 only, several seeds).

    python benchmarks/scifact_false_negatives.py                            # 1 epoch, batch 32, 256 tokens, seed 0
    python benchmarks/scifact_false_negatives.py --seeds 0 1 2 --out runs/scifact-fn
    python benchmarks/scifact_false_negatives.py --quick                    # 2 steps, 64 tokens: a check that it runs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import add_minilm_arguments, machine, minilm_job, scifact_data, set_threads  # type: ignore[import-not-found]

from contrastlab.eval.bootstrap import bootstrap_mean
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.dev_metrics import DevSet, embed_texts, read_dev, retrieval_metrics
from contrastlab.train.job.runner import run_job
from contrastlab.train.job.select import DevConfig

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact-train"
ARMS = ("sampler", "off")


def job(args: argparse.Namespace, arm: str, seed: int, steps: int) -> JobConfig:
    """The fine-tuning run of one arm and seed."""
    return minilm_job(scifact_data(args.data, args.batch, arm), args, steps, seed, log_every=1, schedule="constant")


def dev_subset(dev: DevSet, max_queries: int, max_documents: int) -> DevSet:
    """The first ``max_queries`` dev queries against their relevant documents plus the first ``max_documents``
    others (0: all of them; a check that the script runs, not a measurement)."""
    if not max_queries and not max_documents:
        return dev
    n = max_queries or len(dev.queries)
    keep = sorted({d for rel in dev.relevant[:n] for d in rel} | set(range(min(max_documents, len(dev.documents)))))
    new = {d: i for i, d in enumerate(keep)}
    ids = None if dev.doc_ids is None else tuple(dev.doc_ids[d] for d in keep)
    return DevSet(
        dev.queries[:n],
        tuple(dev.documents[d] for d in keep),
        tuple({new[d]: g for d, g in rel.items()} for rel in dev.relevant[:n]),
        dev.name,
        doc_ids=ids,
    )


def dev_ndcg(model: torch.nn.Module, dev: DevSet) -> np.ndarray:
    """Per-query nDCG@10 of ``model`` on ``dev`` (every query against every document)."""
    with torch.no_grad():
        q = embed_texts(model, dev.queries, "")
        d = embed_texts(model, dev.documents, "")
    out = retrieval_metrics(q, d, dev.relevant, ["ndcg@10"], normalize=True, doc_ids=dev.doc_ids, per_query=True)
    return np.asarray(out["ndcg@10"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=SCIFACT, help="the SciFact BEIR folder (train split)")
    ap.add_argument("--out", type=Path, default=Path("runs/scifact-false-negatives"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    add_minilm_arguments(ap)
    ap.add_argument("--steps", type=int, default=0, help="optimiser steps (0: one epoch of the train part)")
    ap.add_argument(
        "--quick", action="store_true", help="2 steps, 64 tokens, 20 dev queries, 200 documents: a check that it runs"
    )
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if args.quick:
        args.steps, args.max_seq_length = 2, 64
    set_threads(args.threads)
    if not args.data.is_dir():
        raise SystemExit(f"--data: {args.data} is not a folder (the shared SciFact task)")
    dev = read_dev(DevConfig(path=str(args.data), kind="task", split="train", part="dev", dev_fraction=0.2, seed=0))
    if args.quick:
        dev = dev_subset(dev, 20, 200)
    from contrastlab.models.text import TEXT_ENCODERS
    from contrastlab.train.job.export import run_text_encoder
    from contrastlab.train.job.text_sources import read_source

    train_pairs = len(read_source(job(args, "off", 0, 1).data.sources.datasets[0], "data")) - 2  # 2 held out
    steps = args.steps or train_pairs // args.batch
    print(f"# {machine()}", flush=True)
    print(f"# {train_pairs} training pairs, {len(dev.queries)} dev queries, {len(dev.documents)} documents", flush=True)
    print(
        f"# batch {args.batch}, {steps} steps, max_seq_length {args.max_seq_length}, lr {args.lr}, seeds {args.seeds}"
    )
    t0 = time.perf_counter()
    base = dev_ndcg(TEXT_ENCODERS["minilm"](None, args.max_seq_length).eval(), dev)
    print(f"base model: nDCG@10 {base.mean():.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    per: dict[str, list[np.ndarray]] = {arm: [] for arm in ARMS}
    for seed in args.seeds:
        for arm in ARMS:
            t0 = time.perf_counter()
            run = args.out / f"{arm}-seed{seed}"
            results = run_job(job(args, arm, seed, steps), run)
            encoder, _, _ = run_text_encoder(run)
            scores = dev_ndcg(encoder, dev)
            per[arm].append(scores)
            print(
                f"seed {seed} {arm:>7}: nDCG@10 {scores.mean():.4f}  train loss {results['metrics']['train_loss']:.4f}  "
                f"({results['runtime_s']:.0f} s training, {time.perf_counter() - t0:.0f} s in all)"
            )
    diff = np.stack(per["sampler"], axis=1) - np.stack(per["off"], axis=1)  # (Q, seeds)
    mean, low, high = bootstrap_mean(diff, 10_000, np.random.default_rng(0))
    summary = {
        "base": float(base.mean()),
        **{arm: float(np.mean([s.mean() for s in per[arm]])) for arm in ARMS},
        "diff": mean,
        "diff_ci95": [low, high],
        "queries": int(diff.shape[0]),
        "seeds": args.seeds,
        "steps": steps,
    }
    print("| arm | nDCG@10 (dev, mean over seeds) |\n|---|---:|", flush=True)
    print(f"| base model | {summary['base']:.4f} |", flush=True)
    for arm in ARMS:
        print(f"| false_negatives: {arm} | {summary[arm]:.4f} |", flush=True)
    print(
        f"sampler − off, per-query paired: {mean:+.4f} [{low:+.4f}, {high:+.4f}] (95% bootstrap, {diff.shape[0]} queries)"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
