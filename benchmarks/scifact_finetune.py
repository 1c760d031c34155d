"""A fine-tune that moves a real benchmark: MiniLM on SciFact's train queries, scored on a held-out part.

The BEIR SciFact train split (``../shared/data/scifact-train``, CC BY-NC: read in place, never copied) is split
by :func:`contrastlab.tasks.holdout` (``dev_fraction=0.2, seed=0``: a hash of each query id) into a train part
and a dev part. Nothing is tuned: the recipe is sentence-transformers' usual MultipleNegativesRankingLoss one
(batch 32, peak learning rate 2e-5 with 10% warm-up, scale 20 = τ 0.05, ``--epochs`` passes over the train
part's pairs, 256 tokens), so the dev part is used once, to measure. Three models are audited on the dev part
(its queries against the whole 5,183-abstract corpus, ``contrastlab audit --task … --task_part dev``):

* ``base``: the bundled all-MiniLM-L6-v2;
* ``contrastlab``: ``contrastlab train`` on the train part's task source — one pair per relevant abstract, batches
  with no repeated text and no query's other relevant abstract (``false_negatives: sampler``), InfoNCE at τ 0.05,
  AdamW with cosine decay after the warm-up;
* ``st-mnrl`` (the anchor): sentence-transformers' own trainer with ``MultipleNegativesRankingLoss(scale=20)``
  and its ``NO_DUPLICATES`` batch sampler on the same pairs, the same steps, batch, peak rate and warm-up (its
  default linear decay).

``contrastlab compare`` then sets each fine-tune against the base model and against each other, query by query
(bootstrap intervals, paired randomisation tests, Holm). With ``--with-off`` a fourth model,
``contrastlab-off``, is the same ``contrastlab train`` job with ``false_negatives: off`` (plain shuffled
batches, where a query's other relevant abstract or a repeated text can be an in-batch negative), compared with
the ``contrastlab`` one: the effect of keeping false negatives out of the batch. Each stage keeps its output,
so a rerun resumes.

    python benchmarks/scifact_finetune.py --epochs 2 --with-off --out runs/scifact-finetune
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from _common import (
    ROOT,
    add_minilm_arguments,
    machine,
    minilm_job,
    scifact_data,
    scifact_train_pairs,
    set_threads,
    st_mnrl_fit,
)

SCIFACT = ROOT.parent / "shared" / "data" / "scifact-train"


def contrastlab_job(args: argparse.Namespace, steps: int, false_negatives: str = "sampler"):
    """The ``contrastlab train`` job of the fine-tune."""
    data = scifact_data(args.task, args.batch, false_negatives)
    return minilm_job(data, args, steps, args.seed, log_every=1)


def st_anchor(args: argparse.Namespace, steps: int, folder: Path) -> float:
    """sentence-transformers' MNRL fine-tune into ``folder/model``; its wall seconds."""
    anchors, positives = scifact_train_pairs(args.task)
    wall = st_mnrl_fit(
        anchors,
        positives,
        folder,
        max_seq_length=args.max_seq_length,
        batch=args.batch,
        steps=steps,
        lr=args.lr,
        seed=args.seed,
    )
    shutil.rmtree(folder / "trainer", ignore_errors=True)
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", type=Path, default=SCIFACT)
    ap.add_argument("--out", type=Path, default=Path("runs/scifact-finetune"))
    ap.add_argument("--epochs", type=int, default=1)
    add_minilm_arguments(ap)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-off", action="store_true", help="also train and audit false_negatives: off")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if not args.task.is_dir():
        print(f"no SciFact task at {args.task} (give --task DIR)", file=sys.stderr)
        return 2
    set_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.compare import CompareConfig, compare
    from contrastlab.audit.run import audit
    from contrastlab.train.job.runner import run_job

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    n_pairs = len(scifact_train_pairs(args.task)[0])
    steps = args.epochs * (n_pairs // args.batch)
    print(f"# {machine()}; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"# {n_pairs} training pairs, batch {args.batch}, {steps} steps, lr {args.lr}, {args.max_seq_length} tokens")
    record_path = out / "finetune.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if not (out / "contrastlab" / "model").is_dir():
        t = time.perf_counter()
        run_job(contrastlab_job(args, steps), out / "contrastlab")
        record["contrastlab_train_s"] = time.perf_counter() - t
    if not (out / "st-mnrl" / "model").is_dir():
        record["st_train_s"] = st_anchor(args, steps, out / "st-mnrl")
    if args.with_off and not (out / "contrastlab-off" / "model").is_dir():
        t = time.perf_counter()
        run_job(contrastlab_job(args, steps, "off"), out / "contrastlab-off")
        record["contrastlab_off_train_s"] = time.perf_counter() - t
    record.update(steps=steps, pairs=n_pairs, batch=args.batch, lr=args.lr, max_seq_length=args.max_seq_length)
    record_path.write_text(json.dumps(record, indent=1))
    print(
        f"training wall time: contrastlab {record['contrastlab_train_s']:.0f} s, sentence-transformers "
        f"{record['st_train_s']:.0f} s"
    )
    models = {"base": "minilm", "contrastlab": str(out / "contrastlab"), "st-mnrl": str(out / "st-mnrl" / "model")}
    if args.with_off:
        models["contrastlab-off"] = str(out / "contrastlab-off")
    for name, model in models.items():
        where = out / f"audit-{name}"
        if not (where / "results.json").is_file():
            cfg = AuditConfig(
                model=model, task=str(args.task), task_split="train", task_part="dev", progress=False, n_boot=2000
            )
            t = time.perf_counter()
            res = audit(cfg, where)
            print(f"audit {name}: nDCG@10 {res['metrics']['ndcg_at_10']:.4f} ({time.perf_counter() - t:.0f} s)")
    cmp_cfg = CompareConfig(metrics=("ndcg_at_10", "map_at_100", "recall_at_100", "mrr_at_10"))
    comparisons = [
        ("against the base model", ["audit-base", "audit-contrastlab", "audit-st-mnrl"]),
        ("contrastlab against the sentence-transformers anchor", ["audit-st-mnrl", "audit-contrastlab"]),
    ]
    if args.with_off:
        comparisons.append(
            (
                "false negatives kept out (sampler) against plain batches (off)",
                ["audit-contrastlab-off", "audit-contrastlab"],
            )
        )
    for label, pair in comparisons:
        res = compare([out / p for p in pair], out / f"compare-{pair[0]}", cmp_cfg)
        print(f"\n{label}:")
        for r in res["comparisons"]:
            print(
                f"  {r['other'][:40]:<40} − {r['baseline'][:28]:<28} {r['metric']:<14} {r['difference']:+.4f} "
                f"[{r['low']:+.4f}, {r['high']:+.4f}]  p {r['p']:.4f}  Holm {r['p_holm']:.4f}"
            )
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
