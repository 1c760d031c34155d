"""text-finetune: fine-tune the bundled all-MiniLM-L6-v2 on the docstring corpus with InfoNCE and WEINCE, then audit.

The training pairs are the code corpus's train split (docstring → signature, :mod:`contrastlab.data.text.code_corpus`);
each loss is run through sentence-transformers' own trainer (:class:`contrastlab.adapters.sentence_transformers.ContrastlabLoss`)
for every seed, the fine-tuned model is saved, and ``contrastlab audit`` measures it — and the pretrained
model — on the held-out test queries against the corpus's signatures. The table gives held-out R@1 and
MRR per model with percentile-bootstrap intervals over queries, the mean over seeds with a t-interval, and
paired differences (fine-tuned − pretrained, WEINCE − InfoNCE) bootstrapped over the same queries.

Every (loss, seed) run is cached in ``out_dir/<loss>-seed<seed>/``: the model is saved atomically with a
``train.json`` record of its settings, then audited; a rerun with the same settings reuses both, so an
interrupted campaign resumes where it stopped. Runs go ``workers`` at a time on separate processes (one
torch thread each). Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contrastlab.eval.bootstrap import bootstrap_mean
from contrastlab.experiments._minilm_finetune import (
    TRAIN_RECORD,
    FinetuneSettings,
    audit_config,
    executor,
    finetuned_model,
)

if TYPE_CHECKING:
    from contrastlab.eval.probe import MeanCI

__all__ = ["Config", "QUICK", "TRAIN_RECORD", "run"]


@dataclass(frozen=True)
class Config(FinetuneSettings):
    """Settings of the fine-tuning comparison: the losses, then the settings of every MiniLM fine-tuning run."""

    losses: tuple[str, ...] = ("info_nce", "weince")
    """contrastlab losses to fine-tune with: info_nce (= MNRL at τ = 1/scale) and/or weince"""


QUICK = Config(
    losses=("info_nce",),
    seeds=(0,),
    steps=40,
    batch_size=16,
    max_seq_length=48,
    max_queries=200,
    max_documents=2000,
    workers=1,
)
"""The demo's text part: the pretrained audit and one short InfoNCE fine-tune, 200 queries against 2,000 documents."""


#: (audit metric, column header) of the per-model audit table.
_AUDIT_COLUMNS = (
    ("tau_star", "τ*"),
    ("cross_entropy_at_tau_star", "held-out CE at τ* (nats)"),
    ("alignment", "alignment"),
    ("uniformity_documents", "uniformity (documents)"),
    ("risk_gap_slope", "risk-gap slope vs k"),
    ("gpd_xi", "GPD ξ̂"),
    ("frac_anchors_weibull", "share favouring Weibull"),
    ("auroc_norm", "norm AUROC (top-1 right)"),
)

#: (file, caption) of the audit figures shown for the pretrained model and each loss's first seed.
_AUDIT_FIGURES = (
    ("temperature.png", "held-out pair cross-entropy against τ"),
    ("risk.png", "the InfoNCE risk gap against k"),
    ("tails.png", "extreme-value view of the hardest query → document negatives"),
)


def _loss(name: str, temperature: float) -> Any:
    from contrastlab.losses import InfoNCELoss, WEINCELoss

    if name == "info_nce":
        return InfoNCELoss(temperature=temperature)
    if name == "weince":
        return WEINCELoss(temperature=temperature)
    raise ValueError(f"losses: unknown loss {name!r}; known: info_nce, weince")


def _seed_mean_row(name: str, cis: Sequence[MeanCI]) -> list[str]:
    """The retrieval table's row of one loss over its seeds: the mean ± t-interval per metric.

    With one seed there is no interval over seeds: the row says so and gives the value alone.

    Args:
        name: the loss.
        cis: one :func:`contrastlab.eval.probe.mean_ci` per metric column, over the same seeds.

    Raises:
        ValueError: ``cis`` is empty or its entries are over different numbers of seeds.
    """
    counts = {ci.n for ci in cis}
    if len(counts) != 1:
        raise ValueError(f"cis must hold at least one interval, all over the same seeds; got seed counts {counts}")
    (n,) = counts
    if n == 1:
        return [f"{name}: 1 seed, no interval", *(f"{ci.mean:.3f}" for ci in cis)]
    return [f"{name}: mean ± t-interval over {n} seeds", *(ci.format(digits=3) for ci in cis)]


def _cached_audit(where: Path, cfg: Any) -> dict[str, Any] | None:
    """The audit's results in ``where`` if complete, intact and made with the audit settings ``cfg``; else None."""
    from contrastlab.io import CorruptFileError, read_json_verified, to_jsonable

    try:
        stored = read_json_verified(where / "results.json")
    except (FileNotFoundError, CorruptFileError):
        return None
    if stored.get("config") != to_jsonable(asdict(cfg)) or "per_query" not in stored:
        return None
    return {**stored, "out_dir": str(where)}


def _audit_task(config: Config, model: str, where: str) -> dict[str, Any]:
    """Audit one model into ``where`` unless an identical audit is already there."""
    from contrastlab.audit.run import audit

    cfg = audit_config(config, model)
    return _cached_audit(Path(where), cfg) or audit(cfg, where)


def _finetune_task(config: Config, loss_name: str, seed: int, run_dir: str) -> dict[str, Any]:
    """Fine-tune one (loss, seed) unless its model is cached, then audit it (also cached)."""
    folder = Path(run_dir)
    run_key = {"loss": loss_name, "seed": seed}
    record = finetuned_model(folder, _loss(loss_name, config.temperature), run_key, config, seed)
    result = _audit_task(config, str((folder / "model").resolve()), str(folder / "audit"))  # one name per model
    return {**result, "train": record}


def run(config: Config, out_dir: Path) -> dict:
    """Fine-tune per loss and seed (cached), audit every model, compare held-out R@1 and MRR."""
    from contrastlab.audit.diagnostics import mrr_key as mrr_key_of
    from contrastlab.eval.probe import mean_ci
    from contrastlab.seeds import stream_rng

    for name in config.losses:
        _loss(name, config.temperature)  # unknown names fail before any training
    out_dir = Path(out_dir)
    jobs: dict[str, Any] = {}
    with executor(config.workers) as pool:
        # the pretrained audit first (every comparison needs it), then seed by seed, each loss in turn, so
        # that a campaign stopped early still compares the losses
        jobs["pretrained"] = pool.submit(_audit_task, config, "minilm", str(out_dir / "pretrained"))
        for seed in config.seeds:
            for name in config.losses:
                tag = f"{name}-seed{seed}"
                jobs[tag] = pool.submit(_finetune_task, config, name, seed, str(out_dir / tag))
        results: dict[str, dict[str, Any]] = {tag: fut.result() for tag, fut in jobs.items()}

    base = results["pretrained"]["per_query"]
    mrr_key = mrr_key_of(audit_config(config, "minilm").ks)
    metric_keys = ("recall@1", mrr_key)
    for tag, res in results.items():
        if res["per_query"]["pair_index"] != base["pair_index"]:
            raise RuntimeError(f"{tag}: audited on other queries than the pretrained model")
    per = {
        tag: {m: np.asarray(res["per_query"][m], dtype=np.float64) for m in metric_keys} for tag, res in results.items()
    }
    rng = stream_rng(0, "text-finetune-bootstrap")  # TRY NOT TO MODIFY: seeding of the bootstrap

    def boot_cell(values: np.ndarray) -> str:
        mean, low, high = bootstrap_mean(values, config.n_boot, rng)
        return f"{mean:.3f} [{low:.3f}, {high:.3f}]"

    rows: list[list[Any]] = [[tag, *(boot_cell(per[tag][m]) for m in metric_keys)] for tag in results]
    metrics: dict[str, float] = {f"pretrained_{m}": float(per["pretrained"][m].mean()) for m in metric_keys}
    diff_rows: list[list[Any]] = []
    seed_mean: dict[str, dict[str, np.ndarray]] = {}
    for name in config.losses:
        tags = [f"{name}-seed{s}" for s in config.seeds]
        cis = [mean_ci([float(per[t][m].mean()) for t in tags]) for m in metric_keys]
        for m, ci in zip(metric_keys, cis, strict=True):
            metrics[f"{name}_{m}"] = ci.mean
            if ci.n > 1:  # one seed has no spread: no metric rather than a NaN
                metrics[f"{name}_{m}_seed_sd"] = ci.std
        rows.append(_seed_mean_row(name, cis))
        seed_mean[name] = {m: np.stack([per[t][m] for t in tags], axis=1) for m in metric_keys}
        diff_rows.append(
            [
                f"{name} (mean of seeds) − pretrained",
                *(boot_cell(seed_mean[name][m] - per["pretrained"][m][:, None]) for m in metric_keys),
            ]
        )
    if len(config.losses) == 2:
        a, b = config.losses
        diffs = [seed_mean[b][m].mean(axis=1) - seed_mean[a][m].mean(axis=1) for m in metric_keys]
        for m, d in zip(metric_keys, diffs, strict=True):
            metrics[f"{b}_minus_{a}_{m}"] = float(d.mean())
        diff_rows.append([f"{b} − {a} (means of seeds)", *(boot_cell(d) for d in diffs)])

    first = next((r for r in results.values() if "train" in r), None)
    train_pairs = first["train"]["train_pairs"] if first else 0
    train_cpu = [r["train"]["train_cpu_s"] for r in results.values() if "train" in r]
    if train_cpu:
        metrics["train_cpu_s_median"] = float(np.median(train_cpu))
    summary = (
        f"all-MiniLM-L6-v2 fine-tuned for {config.steps} steps (batch {config.batch_size}, τ = {config.temperature}, "
        f"{config.max_seq_length} tokens) on {train_pairs:,} docstring → signature pairs; held-out R@1 "
        f"({results['pretrained']['metrics']['num_queries']:.0f} test queries): pretrained "
        f"{metrics['pretrained_recall@1']:.3f}, "
        + ", ".join(
            f"{n} {metrics[f'{n}_recall@1']:.3f}"
            + (f" (seed s.d. {metrics[f'{n}_recall@1_seed_sd']:.3f})" if len(config.seeds) > 1 else "")
            for n in config.losses
        )
        + (f" (mean over {len(config.seeds)} seeds)" if len(config.seeds) > 1 else " (one seed)")
        + "; intervals in the tables."
    )
    columns = ["model", "R@1", mrr_key.upper()]
    audit_rows = [[tag, *(res["metrics"].get(k) for k, _ in _AUDIT_COLUMNS)] for tag, res in results.items()]
    figures = []
    for tag, folder in [("pretrained", "pretrained")] + [
        (f"{n}-seed{config.seeds[0]}", f"{n}-seed{config.seeds[0]}/audit") for n in config.losses
    ]:
        for file, caption in _AUDIT_FIGURES:
            if (out_dir / folder / file).is_file():
                figures.append({"file": f"{folder}/{file}", "caption": f"{tag}: {caption}"})
    return {
        "summary": summary,
        "metrics": metrics,
        "tables": [
            {
                "title": "Held-out retrieval, pretrained vs fine-tuned (95% bootstrap intervals over queries; "
                "t-intervals over seeds for the means)",
                "columns": columns,
                "rows": rows,
            },
            {
                "title": "Paired differences on the same queries (95% bootstrap intervals over queries; "
                "seed-to-seed variation not included)",
                "columns": columns,
                "rows": diff_rows,
            },
            {
                "title": "The audit of each model (contrastlab audit; per-model reports in the folders under audits)",
                "columns": ["model", *(c for _, c in _AUDIT_COLUMNS)],
                "rows": audit_rows,
            },
        ],
        "figures": figures,
        "audits": {tag: res["out_dir"] for tag, res in results.items()},
        "train": {tag: res["train"] for tag, res in results.items() if "train" in res},
    }
