"""Experiment ``norm-calibration``: is the pre-normalisation norm a free confidence for retrieval?

Claim under test (Su, Ren & Veitch 2026, arXiv 2606.30625, abstract): the norm a cosine loss ignores can serve as
a calibration signal for retrieval. For each encoder we embed a labelled query set and corpus, retrieve the
top-1 neighbour by cosine, and ask how well each score predicts whether that neighbour has the query's
label (``contrastlab.eval.calibration``): the norm, the max softmax probability (MSP) of the softmax
search at the training temperature, and the MSP with the per-query temperature ``τ·r_ref/‖φ(q)‖``. AUROC
and ECE (after an isotonic map fitted on a held-out half) are reported on the other half.

Data: (1) the concept world (noisy views of items; label = item), MLP encoder; (2) scikit-learn's bundled
digits (8×8) through the vision pipeline (``contrastlab.data.load_digits``, ``TwoViewBatches`` with the
``simclr_all`` views, ``contrastlab.models.build_encoder("cnn")``) trained SimCLR-style on the train split
(the corpus); queries are the test digits, clean and with Gaussian pixel noise of a random strength (so
some queries are genuinely degraded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab.data import TwoViewBatches, augmentation_regime, load_digits
from contrastlab.eval.calibration import CalibrationReport, calibration_report, plot_reliability, top1_retrieval
from contrastlab.losses import info_nce
from contrastlab.models import MLP, build_encoder
from contrastlab.seeds import stream_generator, stream_rng
from contrastlab.train import OptimConfig, TrainConfig, fit
from contrastlab.worlds.concepts import ConceptBatch, ConceptWorld


@dataclass(frozen=True)
class Config:
    """Settings of ``norm-calibration``."""

    temperature: float = 0.2
    """InfoNCE and softmax-search temperature"""
    dim: int = 32
    """embedding dimension"""
    hidden: int = 256
    """MLP hidden width (two hidden layers)"""
    lr: float = 0.002
    """Adam step size"""
    concept_steps: int = 1500
    """training steps on the concept world"""
    concept_view_noise: float = 0.5
    """view noise of the concept world (sets how hard retrieval is)"""
    concept_queries_per_item: int = 20
    """queries per concept item"""
    concept_corpus_per_item: int = 3
    """corpus views per concept item"""
    digits_steps: int = 1500
    """training steps on digits"""
    digits_batch: int = 256
    """digits batch size"""
    digits_test_fraction: float = 0.4
    """share of each digit class held out as queries (the rest is the training set and the corpus)"""
    digits_encoder: str = "cnn"
    """image encoder of ``contrastlab.models.build_encoder`` for digits"""
    digits_width: int = 16
    """its width knob"""
    digits_augmentation: str = "simclr_all"
    """view regime of ``contrastlab.data.augmentation_regime`` (crop scale (0.5, 1))"""
    max_corruption: float = 0.6
    """corrupted queries get Gaussian pixel noise of std U(0, max) (pixels in [0, 1])"""
    n_bins: int = 15
    """ECE bins"""
    seed: int = 0
    """seed of the data, initialisation, batches and the calibration split"""


QUICK = Config(concept_steps=400, digits_steps=400, hidden=128, concept_queries_per_item=10)


def _init_mlp(in_dim: int, c: Config) -> MLP:
    with torch.random.fork_rng():
        torch.manual_seed(c.seed)
        return MLP(in_dim, [c.hidden, c.hidden], c.dim)


def _train_config(c: Config, steps: int) -> TrainConfig:
    """Adam at the configured step size for ``steps`` steps, logged ten times, quietly."""
    return TrainConfig(
        steps=steps, seed=c.seed, progress=False, log_every=max(1, steps // 10), optim=OptimConfig(name="adam", lr=c.lr)
    )


def _concept_world(c: Config, out_dir: Path) -> tuple[Tensor, Tensor, Tensor, Tensor, float]:
    world = ConceptWorld(branching=3, depth=3, ambiguous_fraction=0.5, view_noise=c.concept_view_noise, seed=c.seed)
    model = _init_mlp(world.input_dim, c)

    def loss_fn(m: nn.Module, b: ConceptBatch) -> Tensor:
        assert b.x_anchor is not None and b.x_positive is not None
        return info_nce(m(b.x_anchor), m(b.x_positive), temperature=c.temperature)

    cfg = _train_config(c, c.concept_steps)
    source = world.batch_source(batch_size=128, seed=c.seed, views=True)
    res = fit(model, loss_fn, source, cfg, out_dir=out_dir / "train_concepts")
    g = stream_generator(c.seed, "concept_views")
    items = torch.arange(world.n_items)
    q_items = items.repeat(c.concept_queries_per_item)
    c_items = items.repeat(c.concept_corpus_per_item)
    with torch.no_grad():
        q = res.model(world.view(q_items, generator=g))
        corpus = res.model(world.view(c_items, generator=g))
    return q, q_items, corpus, c_items, res.seconds


def _digits(c: Config, out_dir: Path) -> tuple[dict[str, tuple[Tensor, Tensor, Tensor, Tensor]], float]:
    """SimCLR-style training on the digits train split with the vision pipeline's loader, views, encoder."""
    train = load_digits("train", test_fraction=c.digits_test_fraction, split_seed=c.seed)
    test = load_digits("test", test_fraction=c.digits_test_fraction, split_seed=c.seed)
    aug = augmentation_regime(c.digits_augmentation, 8, crop_scale=(0.5, 1.0))
    batches = TwoViewBatches(train, aug, batch_size=c.digits_batch, seed=c.seed)
    with torch.random.fork_rng():
        torch.manual_seed(c.seed)
        model = build_encoder(c.digits_encoder, 1, 8, c.dim, width=c.digits_width)

    def loss_fn(m: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        return info_nce(m(batch[0]), m(batch[1]), temperature=c.temperature, symmetric=True)

    cfg = _train_config(c, c.digits_steps)
    res = fit(model, loss_fn, batches.batch_at, cfg, out_dir=out_dir / "train_digits")
    g = stream_generator(c.seed, "corruption")
    x_te = test.float_images()
    strength = c.max_corruption * torch.rand(len(x_te), 1, 1, 1, generator=g)
    x_cor = (x_te + strength * torch.randn(x_te.shape, generator=g)).clamp(0, 1)
    with torch.no_grad():
        corpus = res.model(train.float_images())
        clean = res.model(x_te)
        corrupted = res.model(x_cor)
    return {
        "digits (clean queries)": (clean, test.labels, corpus, train.labels),
        "digits (corrupted queries)": (corrupted, test.labels, corpus, train.labels),
    }, res.seconds


def _plot_norm_histograms(sets: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]], path: Path) -> None:
    fig, axes = figures.subplots(1, len(sets), figsize=(3.8 * len(sets), 3.2), squeeze=False)
    for ax, (name, (q, ql, corpus, cl)) in zip(axes[0], sets.items(), strict=True):
        ok = top1_retrieval(q, ql, corpus, cl).numpy()
        norms = q.double().norm(dim=1).numpy()
        bins = np.linspace(norms.min(), norms.max(), 30)
        ax.hist(norms[ok], bins=bins, alpha=0.6, density=True, label=f"correct ({ok.sum()})")
        ax.hist(norms[~ok], bins=bins, alpha=0.6, density=True, label=f"wrong ({(~ok).sum()})")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("‖φ(q)‖")
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)


class ScoreRow(NamedTuple):
    """One confidence score on one query set: how well it predicts top-1 retrieval correctness."""

    data: str
    score: str
    auroc: float
    ece_raw: float | None
    """ECE of the raw score (None when the score is not a probability)"""
    ece_isotonic: float
    top1_accuracy: float
    n_test: int


#: Column headers of the table of :class:`ScoreRow` records, in field order.
SCORE_COLUMNS = ["data", "score", "AUROC", "ECE raw", "ECE isotonic", "top-1 acc", "n test"]


def run(config: Config, out_dir: Path) -> dict:
    """Train the two encoders and compare norm and MSP as top-1 retrieval confidences."""
    c = config
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sets: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]] = {}
    sets["concept world"] = _concept_world(c, out_dir)[:4]
    digit_sets, _ = _digits(c, out_dir)
    sets.update(digit_sets)

    rows: list[ScoreRow] = []
    metrics: dict[str, float] = {}
    figures: list[dict[str, str]] = []
    reports: dict[str, CalibrationReport] = {}
    for k, (name, (q, ql, corpus, cl)) in enumerate(sets.items()):
        rep = calibration_report(
            q,
            ql,
            corpus,
            cl,
            temperature=c.temperature,
            n_bins=c.n_bins,
            rng=stream_rng(c.seed, "calibration_split", k),
        )
        reports[name] = rep
        slug = name.split(" (")[0].replace(" ", "_") + ("_corrupted" if "corrupted" in name else "")
        for s in rep.scores:
            rows.append(ScoreRow(name, s.name, s.auroc, s.ece_raw, s.ece_isotonic, rep.accuracy, rep.n_test))
            metrics[f"{slug}/{s.name}/auroc"] = s.auroc
            metrics[f"{slug}/{s.name}/ece_isotonic"] = s.ece_isotonic
            if s.ece_raw is not None:
                metrics[f"{slug}/{s.name}/ece_raw"] = s.ece_raw
        metrics[f"{slug}/top1_accuracy"] = rep.accuracy
        fig = f"reliability_{slug}.png"
        plot_reliability(rep, out_dir / fig, title=name)
        figures.append({"file": fig, "caption": f"{name}: reliability diagrams (test half) of each confidence."})
    _plot_norm_histograms(sets, out_dir / "norm_histograms.png")
    figures.append({"file": "norm_histograms.png", "caption": "Query norms of correct vs wrong top-1 retrievals."})

    def line(name: str) -> str:
        by = {s.name: s for s in reports[name].scores}
        return (
            f"{name} (top-1 acc {reports[name].accuracy:.3f}): AUROC norm {by['norm'].auroc:.3f} vs MSP "
            f"{by['msp'].auroc:.3f} vs norm-temperature MSP {by['msp_norm_temperature'].auroc:.3f}; ECE after "
            f"isotonic {by['norm'].ece_isotonic:.3f} / {by['msp'].ece_isotonic:.3f} / "
            f"{by['msp_norm_temperature'].ece_isotonic:.3f}; raw MSP ECE {by['msp'].ece_raw:.3f}"
        )

    summary = (
        "Top-1 cosine retrieval; confidence = pre-normalisation query norm, max softmax probability (MSP) of the "
        f"softmax search at τ={c.temperature}, or MSP with the per-query temperature τ·r_ref/‖φ(q)‖. Half of the "
        "queries fit the isotonic maps, the other half is scored. " + "; ".join(line(n) for n in sets) + "."
    )
    return {
        "summary": summary,
        "metrics": metrics,
        "tables": [
            {
                "title": "Confidence for top-1 retrieval correctness (test half)",
                "columns": SCORE_COLUMNS,
                "rows": rows,
            }
        ],
        "figures": figures,
    }
