"""Distillation on SciFact: the bundled MiniLM fine-tuned with a teacher's scores against plain InfoNCE.

Two stages write under ``--work``, a folder outside the repository (SciFact is CC BY-NC), and a third reads:

* ``pairs`` — the train part of ``holdout(task, 0.2, seed=0)`` as (query, relevant document) rows,
  ``WORK/train_pairs.jsonl``, to mine with ``contrastlab mine --teacher``;
* ``configs`` — the three ``contrastlab train`` jobs at one budget (one epoch of the mined rows, batch 32,
  max_seq_length 256, AdamW 2e-5, seed 0): ``WORK/infonce.yaml`` (InfoNCE, τ = 0.05, the mined negatives as
  per-anchor hard negatives), ``WORK/marginmse.yaml`` (MarginMSE on the teacher's cosine scores, cosine
  student at τ = 1) and ``WORK/distillkl.yaml`` (listwise KL over each row's three candidates, student's and
  teacher's softmax both at InfoNCE's τ = 0.05);
* ``teacher-dev`` — the teacher's nDCG@10 on the dev part's queries, read from its audit of the whole split
  (a query's nDCG@10 depends only on its own ranking of the corpus), and each student's paired difference
  from it (``--teacher-audit DIR --audits DIR ...``, audits of the dev part).

The teacher's check and the dev scores are ``contrastlab audit MODEL --task``'s, the comparison
``contrastlab compare``'s (the commands are in docs/ecosystem.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact-train"


def _train_part():
    """The train part of ``holdout(read_beir_task(SCIFACT, "train"), 0.2, seed=0)``."""
    from contrastlab.tasks import holdout, read_beir_task

    train, _ = holdout(read_beir_task(SCIFACT, split="train"), 0.2, seed=0)
    return train


def _teacher_on_dev(teacher_audit: Path, audits: list[Path], metric: str = "ndcg_cut_10") -> None:
    """Print the teacher's mean ``metric`` over each dev audit's queries and the paired difference (that model − the teacher)."""
    import numpy as np

    from contrastlab.audit.compare import load_audits
    from contrastlab.eval.paired import bootstrap_difference, randomization_test

    (teacher,) = load_audits(teacher_audit)
    by_query = dict(zip(teacher.queries, teacher.per_query[metric], strict=True))
    for folder in audits:
        (dev,) = load_audits(folder)
        if dev.identity["corpus"] != teacher.identity["corpus"] or not set(dev.queries) <= set(by_query):
            raise SystemExit(f"--audits: {folder} is not an audit of the teacher's corpus and a subset of its queries")
        t = np.array([by_query[q] for q in dev.queries])
        s = dev.per_query[metric]
        mean, low, high = bootstrap_difference(t, s)
        p = randomization_test(t, s)
        print(
            f"{folder}: {len(s)} queries, {metric} {s.mean():.4f}, the teacher {t.mean():.4f}; "
            f"this model - the teacher {mean:+.4f} [{low:+.4f}, {high:+.4f}], p {p:.3g}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["pairs", "configs", "teacher-dev"])
    ap.add_argument("--work", type=Path, help="pairs, configs: the folder they write (outside the repository)")
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--teacher-audit", type=Path, help="teacher-dev: the teacher's audit of the whole split")
    ap.add_argument("--audits", type=Path, nargs="*", default=[], help="teacher-dev: audits of the dev part")
    args = ap.parse_args()
    if args.stage == "teacher-dev":
        if args.teacher_audit is None:
            ap.error("teacher-dev needs --teacher-audit")
        _teacher_on_dev(args.teacher_audit, args.audits)
        return
    if args.work is None:
        ap.error(f"{args.stage} needs --work")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "pairs":
        task = _train_part()
        text = dict(zip(task.doc_ids, task.doc_texts, strict=True))
        rows = [[qt, text[d]] for q, qt in zip(task.query_ids, task.query_texts, strict=True) for d in task.relevant(q)]
        out = args.work / "train_pairs.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"{len(rows)} pairs of {len(task.query_ids)} train-part queries: {out}")
    elif args.stage == "configs":
        import math

        from contrastlab.config import dump_config, from_dict
        from contrastlab.data.text.pairs import read_text_pairs
        from contrastlab.data.text.teacher_scores import read_teacher_scores, scores_path
        from contrastlab.train.job.config import JobConfig

        mined = args.work / "mined.jsonl"
        pairs = read_text_pairs(mined)
        rows, eval_n, batch = len(pairs), 2, 32
        teacher = read_teacher_scores(scores_path(mined), pairs.rows)  # (rows, 1 + K), verified against the rows
        first = float((teacher[:, 0] > teacher[:, 1:].max(axis=1)).mean())
        print(f"the teacher ranks the positive above every mined negative in {first:.1%} of the {rows} rows")
        common = {
            "encoder": {"name": "minilm", "out_dim": 384, "max_seq_length": args.max_seq_length},
            "train": {"steps": math.ceil((rows - eval_n) / batch), "seed": 0, "log_every": 1,
                      "optim": {"name": "adamw", "lr": 2e-5, "warmup_steps": 2}},
            "eval": {"n": eval_n},
        }  # fmt: skip
        jobs = {
            "infonce": {"data": {"name": "text", "batch_size": batch, "text": {"path": str(mined)}},
                        "loss": {"name": "info_nce", "temperature": 0.05}},
            "marginmse": {"data": {"name": "text", "batch_size": batch,
                                   "text": {"path": str(mined), "teacher_scores": str(scores_path(mined))}},
                          "loss": {"name": "margin_mse", "normalize": True, "temperature": 1.0}},
            "distillkl": {"data": {"name": "text", "batch_size": batch,
                                   "text": {"path": str(mined), "teacher_scores": str(scores_path(mined))}},
                          "loss": {"name": "distill_kl", "normalize": True, "temperature": 0.05}},
        }  # fmt: skip
        for name, job in jobs.items():
            cfg = from_dict(JobConfig, {**common, **job})  # checked here, before a run starts
            dump_config(cfg, args.work / f"{name}.yaml")
            print(f"{args.work / f'{name}.yaml'}: {cfg.train.steps} steps of {batch} ({rows} mined rows)")


if __name__ == "__main__":
    main()
