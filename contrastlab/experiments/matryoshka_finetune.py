"""matryoshka-finetune: fine-tune the bundled all-MiniLM-L6-v2 with and without Matryoshka, measured at each width.

The same budget for both (steps, batch, learning rate, τ, data and seeds): the code corpus's train split
(docstring → signature, :mod:`contrastlab.data.text.code_corpus`) through sentence-transformers' own trainer with
``ContrastlabLoss(model, InfoNCELoss(τ))`` ("plain") or ``ContrastlabLoss(model, MatryoshkaLoss(InfoNCELoss(τ),
dims))`` ("matryoshka": the InfoNCE loss summed over the prefixes of widths ``dims``, weight 1 each;
Kusupati et al. 2022, arXiv 2205.13147). Every model — the pretrained one too — embeds the held-out test
queries and the searched signatures once (the audit's own choice of queries and documents,
:func:`contrastlab.audit.run.load_inputs`); each width d keeps the first d coordinates, and the exact cosine
search over them gives each query's R@1 and reciprocal rank (:func:`contrastlab.audit.diagnostics.retrieval`).

The tables give, per width, each variant's R@1 and MRR averaged over seeds with a 95% percentile-bootstrap
interval over queries, and the paired difference matryoshka − plain on the same queries with two intervals:
the query bootstrap of the seed-averaged per-query difference, and the t-interval over seeds of the per-seed
differences (seed s of one variant against seed s of the other: the same data order).

Each (variant, seed) model is cached in ``out_dir/<variant>-seed<seed>/`` (``train.json`` records its
settings) and its evaluation in ``eval.json`` beside it; a rerun with the same settings reuses both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contrastlab.eval.bootstrap import bootstrap_mean
from contrastlab.experiments._minilm_finetune import FinetuneSettings, audit_config, executor, finetuned_model

__all__ = ["Config", "QUICK", "VARIANTS", "run"]

VARIANTS = ("plain", "matryoshka")
"""InfoNCE on the full embedding, and InfoNCE summed over the prefixes of widths ``dims``."""

_MINILM_DIM = 384
"""all-MiniLM-L6-v2's embedding width."""

_EVAL_RECORD = "eval.json"


@dataclass(frozen=True)
class Config(FinetuneSettings):
    """Settings of the Matryoshka fine-tuning comparison: the widths, then those of every MiniLM fine-tuning run."""

    dims: tuple[int, ...] = (32, 64, 128, 256, 384)
    """strictly increasing prefix widths: the Matryoshka loss's (weight 1 each) and the widths evaluated (384 always)"""


QUICK = Config(
    dims=(32, 128, 384),
    seeds=(0,),
    steps=10,
    batch_size=16,
    max_seq_length=48,
    max_queries=100,
    max_documents=500,
    n_boot=500,
    workers=1,
)
"""One seed, 10 steps of 16 pairs, 100 queries against 500 signatures, widths 32, 128 and 384."""


def _loss(variant: str, config: Config) -> Any:
    from contrastlab.losses import InfoNCELoss, MatryoshkaLoss

    inner = InfoNCELoss(temperature=config.temperature)
    return inner if variant == "plain" else MatryoshkaLoss(inner, dims=config.dims)


def _widths(config: Config) -> tuple[int, ...]:
    return tuple(sorted({*config.dims, _MINILM_DIM}))


def _evaluate(config: Config, model: str, where: Path, train_key: dict[str, Any] | None) -> dict[str, Any]:
    """Per-query R@1 and reciprocal rank of ``model`` at each width (cached in ``where/eval.json``)."""
    import dataclasses

    import torch

    from contrastlab.audit import diagnostics as diag
    from contrastlab.audit.run import embed, load_inputs
    from contrastlab.io import CorruptFileError, read_json_verified, to_jsonable, write_json_atomic

    cfg = audit_config(config, model)
    key = to_jsonable({"audit": asdict(cfg), "widths": _widths(config), "train": train_key})
    try:
        stored = read_json_verified(where / _EVAL_RECORD)
    except (FileNotFoundError, CorruptFileError):
        stored = {}
    if stored.get("key") == key:
        return stored
    inputs = load_inputs(cfg, np.random.default_rng(cfg.seed))  # the audit's own draw of queries and documents
    inputs = dataclasses.replace(inputs, valid_pairs=inputs.valid_pairs[:0])  # no τ to fit: no valid queries
    emb = embed(inputs, cfg)
    doc_pos = np.full(int(inputs.documents.max()) + 1, -1, dtype=np.int64)
    doc_pos[inputs.documents] = np.arange(inputs.documents.size)
    rel = doc_pos[inputs.pairs.doc_of[inputs.eval_pairs]]
    ks = (1, 100)
    mrr = diag.mrr_key(ks)
    per_width: dict[str, dict[str, list[float]]] = {}
    for w in _widths(config):
        if w > emb.queries.shape[1]:
            raise ValueError(f"dims: width {w} is larger than the model's embedding width D = {emb.queries.shape[1]}")
        q = emb.queries[:, :w].to(torch.float64)
        d = emb.documents[:, :w].to(torch.float64)
        per = diag.retrieval(q, d, rel, ks).per_query  # cosine: each prefix is renormalised by the search
        per_width[str(w)] = {"recall@1": per["recall@1"].tolist(), "mrr": per[mrr].tolist()}
    record = {"key": key, "pair_index": inputs.eval_pairs.tolist(), "mrr_name": mrr, "per_width": per_width}
    where.mkdir(parents=True, exist_ok=True)
    write_json_atomic(where / _EVAL_RECORD, record)
    return record


def _pretrained_task(config: Config, where: str) -> dict[str, Any]:
    return _evaluate(config, "minilm", Path(where), None)


def _finetune_task(config: Config, variant: str, seed: int, run_dir: str) -> dict[str, Any]:
    """Fine-tune one (variant, seed) unless its model is cached, then evaluate it at each width (also cached)."""
    folder = Path(run_dir)
    run_key = {"variant": variant, "seed": seed, "dims": config.dims if variant == "matryoshka" else ()}
    record = finetuned_model(folder, _loss(variant, config), run_key, config, seed)
    return {**_evaluate(config, str((folder / "model").resolve()), folder, record["key"]), "train": record}


def _plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """R@1 against the width (log scale), one curve per model, 95% query-bootstrap intervals."""
    from contrastlab.figures import save_png, subplots

    fig, ax = subplots(figsize=(6.0, 4.0))
    for name in ("pretrained", *VARIANTS):
        pts = [(r["width"], r[name]) for r in rows]
        x = [w for w, _ in pts]
        y = [m for _, (m, _, _) in pts]
        err = [[m - lo for _, (m, lo, _) in pts], [hi - m for _, (m, _, hi) in pts]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=2, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks([r["width"] for r in rows], [str(r["width"]) for r in rows])
    ax.set_xlabel("prefix width d (first d coordinates, renormalised)")
    ax.set_ylabel("held-out R@1 (95% bootstrap over queries)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path, dpi=120)


def run(config: Config, out_dir: Path) -> dict:
    """Fine-tune each variant per seed (cached), evaluate every model at each width, compare them paired."""
    from contrastlab.eval.probe import mean_ci
    from contrastlab.losses.matryoshka import check_dims
    from contrastlab.seeds import stream_rng

    check_dims(config.dims, _MINILM_DIM)  # before any training
    if not config.seeds:
        raise ValueError("seeds must name at least one seed")
    out_dir = Path(out_dir)
    jobs: dict[str, Any] = {}
    with executor(config.workers) as pool:
        jobs["pretrained"] = pool.submit(_pretrained_task, config, str(out_dir / "pretrained"))
        for seed in config.seeds:  # seed by seed, both variants in turn: a stopped campaign still compares them
            for variant in VARIANTS:
                tag = f"{variant}-seed{seed}"
                jobs[tag] = pool.submit(_finetune_task, config, variant, seed, str(out_dir / tag))
        results: dict[str, dict[str, Any]] = {tag: fut.result() for tag, fut in jobs.items()}

    base = results["pretrained"]
    for tag, res in results.items():
        if res["pair_index"] != base["pair_index"]:
            raise RuntimeError(f"{tag}: evaluated on other queries than the pretrained model")
    widths = _widths(config)
    metric_names = {"recall@1": "R@1", "mrr": base["mrr_name"].upper()}

    def per(tag: str, w: int, m: str) -> np.ndarray:
        return np.asarray(results[tag]["per_width"][str(w)][m], dtype=np.float64)

    def seeds_of(variant: str, w: int, m: str) -> np.ndarray:  # (Q, seeds)
        return np.stack([per(f"{variant}-seed{s}", w, m) for s in config.seeds], axis=1)

    rng = stream_rng(0, "matryoshka-finetune-bootstrap")  # TRY NOT TO MODIFY: seeding of the bootstrap

    def cell(ci: tuple[float, float, float], signed: bool = False) -> str:
        f = "+.3f" if signed else ".3f"
        return f"{ci[0]:{f}} [{ci[1]:{f}}, {ci[2]:{f}}]"

    metrics: dict[str, float] = {}
    tables: list[dict[str, Any]] = []
    plot_rows: list[dict[str, Any]] = []
    r1_diff: dict[int, tuple[float, float, float]] = {}
    for m, label in metric_names.items():
        rows: list[list[Any]] = []
        for w in widths:
            pre = bootstrap_mean(per("pretrained", w, m), config.n_boot, rng)
            plain, mrl = seeds_of("plain", w, m), seeds_of("matryoshka", w, m)
            ci_plain = bootstrap_mean(plain, config.n_boot, rng)
            ci_mrl = bootstrap_mean(mrl, config.n_boot, rng)
            diff = bootstrap_mean(mrl - plain, config.n_boot, rng)
            seed_diff = mean_ci((mrl - plain).mean(axis=0).tolist())
            over_seeds = (
                f"{seed_diff.mean:+.3f} ± {seed_diff.half_width:.3f}" if len(config.seeds) > 1 else "(one seed)"
            )
            rows.append([w, cell(pre), cell(ci_plain), cell(ci_mrl), cell(diff, True), over_seeds])
            metrics.update(
                {
                    f"pretrained_{m}_d{w}": pre[0],
                    f"plain_{m}_d{w}": ci_plain[0],
                    f"matryoshka_{m}_d{w}": ci_mrl[0],
                    f"matryoshka_minus_plain_{m}_d{w}": diff[0],
                    f"matryoshka_minus_plain_{m}_d{w}_low": diff[1],
                    f"matryoshka_minus_plain_{m}_d{w}_high": diff[2],
                }
            )
            if m == "recall@1":
                r1_diff[w] = diff
                plot_rows.append({"width": w, "pretrained": pre, "plain": ci_plain, "matryoshka": ci_mrl})
        tables.append(
            {
                "title": f"Held-out {label} by prefix width: mean over {len(config.seeds)} seed(s) [95% bootstrap "
                "over queries]; matryoshka − plain paired on the same queries (bootstrap) and over seeds (t)",
                "columns": [
                    "width",
                    "pretrained",
                    "plain",
                    "matryoshka",
                    "matryoshka − plain [bootstrap]",
                    "matryoshka − plain, ± t over seeds",
                ],
                "rows": rows,
            }
        )
    seed_rows = [
        [tag, *(f"{per(tag, w, 'recall@1').mean():.3f}" for w in widths)] for tag in results if tag != "pretrained"
    ]
    tables.append(
        {
            "title": "Held-out R@1 of each fine-tuned model by width",
            "columns": ["model", *map(str, widths)],
            "rows": seed_rows,
        }
    )
    _plot(
        plot_rows,
        out_dir / "width.png",
        f"all-MiniLM-L6-v2, {config.steps} steps × {config.batch_size}: plain InfoNCE vs Matryoshka {list(config.dims)}",
    )

    first = next(r for r in results.values() if "train" in r)
    train_cpu = [r["train"]["train_cpu_s"] for r in results.values() if "train" in r]
    metrics["train_cpu_s_median"] = float(np.median(train_cpu))
    lo_w, hi_w = widths[0], widths[-1]
    summary = (
        f"all-MiniLM-L6-v2 fine-tuned for {config.steps} steps (batch {config.batch_size}, τ = {config.temperature}, "
        f"{config.max_seq_length} tokens) on {first['train']['train_pairs']:,} docstring → signature pairs, with "
        f"InfoNCE (plain) and with InfoNCE over the prefixes {list(config.dims)} (matryoshka), {len(config.seeds)} "
        f"seed(s) each; held-out R@1 on {len(base['pair_index'])} test queries. At width {lo_w}: pretrained "
        f"{metrics[f'pretrained_recall@1_d{lo_w}']:.3f}, plain {metrics[f'plain_recall@1_d{lo_w}']:.3f}, matryoshka "
        f"{metrics[f'matryoshka_recall@1_d{lo_w}']:.3f} (paired difference "
        f"{cell(r1_diff[lo_w], True)}"
        f"); at the full {hi_w}: plain {metrics[f'plain_recall@1_d{hi_w}']:.3f}, matryoshka "
        f"{metrics[f'matryoshka_recall@1_d{hi_w}']:.3f} (paired difference "
        f"{cell(r1_diff[hi_w], True)}"
        "). Intervals: 95% bootstrap over queries of the seed-averaged values."
    )
    return {
        "summary": summary,
        "metrics": metrics,
        "tables": tables,
        "figures": [
            {
                "file": "width.png",
                "caption": "Held-out R@1 against the prefix width: pretrained, plain InfoNCE and Matryoshka "
                "fine-tuning (means over seeds, 95% bootstrap over queries).",
            }
        ],
        "train": {tag: res["train"] for tag, res in results.items() if "train" in res},
    }
