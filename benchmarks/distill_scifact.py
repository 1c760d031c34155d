"""Distillation on SciFact: the bundled MiniLM fine-tuned with a teacher's scores against plain InfoNCE.

Stages (each writes under ``--work``, a folder outside the repository: SciFact is CC BY-NC):

* ``teacher`` — the teacher's nDCG@10 on the whole SciFact train split (all 809 queries, the 5,183-document
  corpus), to check the model against its published value before it is trusted as a teacher;
* ``pairs`` — the train part of ``holdout(task, 0.2, seed=0)`` as (query, relevant document) rows,
  ``WORK/train_pairs.jsonl``; then mine it with ``contrastlab mine --teacher`` (the command is printed);
* ``configs`` — the two ``contrastlab train`` jobs at one budget (one epoch of the mined rows, batch 32,
  max_seq_length 256, AdamW 2e-5, seed 0): ``WORK/infonce.yaml`` (InfoNCE, τ = 0.05, the mined negatives as
  per-anchor hard negatives) and ``WORK/marginmse.yaml`` (MarginMSE on the teacher's cosine scores, cosine
  student at τ = 1);
* ``eval NAME=MODEL...`` — nDCG@10 of each model on the dev part (its queries against the whole corpus),
  per query, saved as ``WORK/dev_<name>.npy``;
* ``compare A B`` — the paired bootstrap of the mean nDCG@10 difference B − A over the dev queries.

Run from the repository root with the venv's python; ``--threads`` bounds torch's CPU threads.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact-train"


def _task(split_part: str | None):
    from contrastlab.tasks import holdout, read_beir_task

    task = read_beir_task(SCIFACT, split="train")
    if split_part is None:
        return task
    train, dev = holdout(task, 0.2, seed=0)
    return train if split_part == "train" else dev


def _encode(model_path: str, texts: list[str], max_seq_length: int | None, batch_size: int = 32) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device="cpu")
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)


def _ndcg10(task, q_emb: np.ndarray, d_emb: np.ndarray) -> np.ndarray:
    """Per-query nDCG@10 (trec_eval's ndcg_cut.10) of the exact cosine top-100, in task.query_ids order."""
    from contrastlab.search.graded import evaluate_run

    scores = torch.from_numpy(q_emb) @ torch.from_numpy(d_emb).T
    top = torch.topk(scores, 100, dim=1)
    run = {
        q: {task.doc_ids[j]: float(s) for j, s in zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True)}
        for i, q in enumerate(task.query_ids)
    }
    per = evaluate_run(task.qrels, run, ["ndcg_cut.10"])
    return np.array([per[q]["ndcg_cut_10"] for q in task.query_ids], dtype=np.float64)


def _corpus_embeddings(work: Path, name: str, model: str, task, max_seq_length: int | None) -> np.ndarray:
    path = work / f"corpus_{name}.npy"
    if path.is_file():
        return np.load(path)
    emb = _encode(model, list(task.doc_texts), max_seq_length)
    np.save(path, emb)
    return emb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["teacher", "pairs", "configs", "eval", "compare"])
    ap.add_argument("models", nargs="*", help="eval: name=model-folder ...; compare: name_a name_b")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--teacher", default="/work/models/all-mpnet-base-v2")
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-boot", type=int, default=10_000)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "teacher":  # the model's own max_seq_length (384 for all-mpnet-base-v2), as MTEB runs it
        task = _task(None)
        d = _corpus_embeddings(args.work, "teacher_full", args.teacher, task, None)
        q = _encode(args.teacher, list(task.query_texts), None)
        per = _ndcg10(task, q, d)
        print(json.dumps({"model": args.teacher, "queries": len(per), "ndcg@10": float(per.mean())}))
    elif args.stage == "pairs":
        task = _task("train")
        text = dict(zip(task.doc_ids, task.doc_texts, strict=True))
        rows = [[qt, text[d]] for q, qt in zip(task.query_ids, task.query_texts, strict=True) for d in task.relevant(q)]
        out = args.work / "train_pairs.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"{len(rows)} pairs of {len(task.query_ids)} train-part queries: {out}")
    elif args.stage == "configs":
        import math

        from contrastlab.data.text_pairs import read_text_pairs
        from contrastlab.train.dataconf import dump_config, from_dict
        from contrastlab.train.job_config import JobConfig
        from contrastlab.train.teacher_scores import scores_path

        mined = args.work / "mined.jsonl"
        rows, eval_n, batch = len(read_text_pairs(mined)), 2, 32
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
        }  # fmt: skip
        for name, job in jobs.items():
            cfg = from_dict(JobConfig, {**common, **job})  # checked here, before a run starts
            dump_config(cfg, args.work / f"{name}.yaml")
            print(f"{args.work / f'{name}.yaml'}: {cfg.train.steps} steps of {batch} ({rows} mined rows)")
    elif args.stage == "eval":
        task = _task("dev")
        for spec in args.models:
            name, model = spec.split("=", 1)
            if model == "minilm":
                from contrastlab.models.text import bundled_minilm_path

                model = bundled_minilm_path()
            d = _corpus_embeddings(args.work, name, model, task, args.max_seq_length)
            q = _encode(model, list(task.query_texts), args.max_seq_length)
            per = _ndcg10(task, q, d)
            np.save(args.work / f"dev_{name}.npy", per)
            print(json.dumps({"model": name, "path": model, "dev_queries": len(per), "ndcg@10": float(per.mean())}))
    else:
        from contrastlab.eval.bootstrap import bootstrap_mean

        a, b = (np.load(args.work / f"dev_{n}.npy") for n in args.models)
        mean, lo, hi = bootstrap_mean(b - a, args.n_boot, np.random.default_rng(0))
        print(json.dumps({"a": args.models[0], "b": args.models[1], "queries": len(a), "mean_a": float(a.mean()),
                          "mean_b": float(b.mean()), "diff_b_minus_a": mean, "ci95": [lo, hi]}))  # fmt: skip


if __name__ == "__main__":
    main()
