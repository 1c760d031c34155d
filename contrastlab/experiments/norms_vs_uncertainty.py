"""Experiment ``norms-vs-uncertainty``: does the embedding norm of a contrastive image encoder track label uncertainty?

Claim under test (Su, Ren & Veitch 2026, arXiv 2606.30625, abstract): the norms that a
scale-invariant (cosine) loss discards correlate with human uncertainty, and can serve as a free
calibration signal for retrieval; Draganov et al. (ICML 2025) report smaller norms for unexpected samples.

Protocol: a SimCLR encoder (NT-Xent, no projection head by default, so the loss L2-normalises exactly the
encoder output whose norm we read) is trained on the training images. On the evaluation images, each
with a label distribution, we measure

* Spearman ρ between the pre-normalisation norm ``‖φ(x)‖`` and the entropy of the label distribution
  (95% bootstrap interval); the hypothesis predicts ρ < 0;
* the AUROC of the *low* norm (score ``−‖φ(x)‖``) for separating ambiguous images (largest label share
  ≤ ``ambiguous_max_prob``) from the rest; 0.5 is chance;
* the same two numbers for a baseline uncertainty that costs as little: ``1 − MSP``, the softmax search's
  probability that its top-1 label is wrong (corpus = the training images, at the training τ);
* norm-based retrieval calibration on the evaluation images (``contrastlab.eval.calibration``: AUROC and
  ECE after an isotonic map, for the norm, the MSP and the MSP with the per-query temperature τ·r_ref/‖φ‖).

Data: CIFAR-10 with CIFAR-10H's human label distributions (Peterson et al. 2019) when both are under
``data_root``; otherwise scikit-learn's digits, where the evaluation images are test digits blended with a
digit of another class, ``w·x_a + (1−w)·x_b`` with ``w ~ U(½, 1)``, whose ground-truth uncertainty is the
entropy of ``(w, 1 − w)`` (:mod:`contrastlab.data.blend`). The blends are never seen in training, so on
digits the experiment asks whether the norm falls as an input moves off the data towards a mixture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab.data import (
    ImageDataset,
    TwoViewBatches,
    augmentation_regime,
    blend_images,
    load_cifar10,
    load_cifar10h,
    load_digits,
)
from contrastlab.data.registry import dataset_available, default_data_root
from contrastlab.eval.calibration import (
    auroc,
    calibration_report,
    plot_reliability,
    softmax_search_confidence,
)
from contrastlab.eval.norms import spearman, spearman_bootstrap
from contrastlab.eval.probe import extract_features
from contrastlab.losses import nt_xent
from contrastlab.models import ContrastiveModel, ProjectionHead, build_encoder
from contrastlab.seeds import stream_generator, stream_rng
from contrastlab.train import OptimConfig, TrainConfig, fit, resolve_device

__all__ = ["Config", "QUICK", "EvalSet", "partial_spearman", "run"]


@dataclass(frozen=True)
class Config:
    """Settings of ``norms-vs-uncertainty``."""

    dataset: str = "auto"
    """'auto' (CIFAR-10 + CIFAR-10H when both are under data_root, else digits), 'digits' or 'cifar10'"""
    data_root: str = ""
    """folder holding cifar-10-batches-py/ and cifar10h-counts.npy ('' = $CONTRASTLAB_DATA or ./data)"""
    encoder: str = "resnet18"
    """encoder of contrastlab.models.ENCODERS ('resnet18', 'vit', 'mlp', 'cnn')"""
    width: int = 4
    """the encoder's width knob (ResNet-18: 64 is the full 11 M-parameter model)"""
    embed_dim: int = 64
    """encoder output dimension: the embedding whose norm is read"""
    proj_dim: int = 0
    """projection-head output; 0 = none (the loss normalises the encoder output itself)"""
    regime: str = "simclr_all"
    """augmentation regime of the pre-training views"""
    steps: int = 1500
    """optimiser steps"""
    batch_size: int = 256
    """images per batch"""
    temperature: float = 0.5
    """NT-Xent temperature, also the softmax-search temperature"""
    lr: float = 1e-3
    """Adam step size"""
    train_subset: int = 0
    """train on the first n training images (0 = all)"""
    corpus_size: int = 5000
    """retrieval corpus: the first n training images"""
    n_blends: int = 2000
    """digits only: blended evaluation images"""
    ambiguous_max_prob: float = 0.8
    """an image is ambiguous when its most likely label has probability ≤ this"""
    n_boot: int = 500
    """bootstrap resamples of the Spearman interval"""
    seed: int = 0
    """seed of initialisation, batches, blends and the calibration split"""
    device: str = "auto"
    """'auto' (CUDA when available), 'cpu' or 'cuda'"""


QUICK = Config(steps=800, batch_size=128, n_blends=1500, n_boot=300)
"""Measured 38 s CPU on one thread on digits (≤ 1 min wall on idle cores); numbers in docs/real_images.md."""


@dataclass(frozen=True)
class EvalSet:
    """Evaluation images with label distributions.

    Attributes:
        images: ``(N, C, H, W)``.
        labels: ``(N,)`` the retrieval label (CIFAR-10 label; the dominant digit of a blend).
        probs: ``(N, K)`` label distribution (human shares; ``(w, 1 − w)`` for a blend).
        description: where the distributions come from.
    """

    images: Tensor
    labels: Tensor
    probs: Tensor
    description: str

    @property
    def entropy(self) -> Tensor:
        """``(N,)`` entropy of the label distribution in nats."""
        from contrastlab.data import label_entropy

        return label_entropy(self.probs)


def _load(c: Config) -> tuple[ImageDataset, EvalSet, str]:
    root = Path(c.data_root) if c.data_root else default_data_root()
    name = c.dataset
    if name == "auto":
        have = dataset_available("cifar10", root, "train") and dataset_available("cifar10h", root, "test")
        name = "cifar10" if have else "digits"
    if name == "cifar10":
        train = load_cifar10(root, "train")
        test = load_cifar10(root, "test")
        human = load_cifar10h(root, expected_shape=(len(test), 10))  # one distribution per test image
        ev = EvalSet(test.images, test.labels, human.probs, f"CIFAR-10H human labels ({human.source})")
    elif name == "digits":
        train = load_digits("train")
        blends = blend_images(load_digits("test"), c.n_blends, generator=stream_generator(c.seed, "blends"))
        ev = EvalSet(blends.images, blends.label_a, blends.probs, "test digits blended across classes, w ~ U(0.5, 1)")
    else:
        raise ValueError(f"dataset must be 'auto', 'digits' or 'cifar10', got {c.dataset!r}")
    if c.train_subset:
        train = train.subset(torch.arange(min(c.train_subset, len(train))))
    return train, ev, name


def _train(train: ImageDataset, c: Config, out: Path) -> tuple[nn.Module, float]:
    device = resolve_device(c.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(c.seed)
        enc = build_encoder(c.encoder, train.channels, train.image_size, c.embed_dim, c.width)
        head: nn.Module = ProjectionHead(c.embed_dim, c.proj_dim) if c.proj_dim > 0 else nn.Identity()
        model = ContrastiveModel(enc, head)
    aug = augmentation_regime(c.regime, train.image_size)
    batches = TwoViewBatches(train, aug, min(c.batch_size, len(train)), c.seed, device=device)

    def loss_fn(m: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        return nt_xent(m(batch[0]), m(batch[1]), temperature=c.temperature)

    cfg = TrainConfig(
        steps=c.steps,
        seed=c.seed,
        device=str(device),
        progress=False,
        log_every=max(1, c.steps // 20),
        optim=OptimConfig(name="adam", lr=c.lr),
    )
    res = fit(model, loss_fn, batches.batch_at, cfg, out_dir=out / "train")
    trained = res.model
    assert isinstance(trained, ContrastiveModel)
    return trained.encoder, float(res.history[-1]["loss"])


def partial_spearman(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """Spearman correlation of ``x`` and ``y`` with ``z`` partialled out (partial Pearson of the ranks).

    ``ρ_xy·z = (ρ_xy − ρ_xz ρ_yz) / √((1 − ρ_xz²)(1 − ρ_yz²))`` with ρ the Spearman correlations.
    """
    rxy, rxz, ryz = spearman(x, y), spearman(x, z), spearman(y, z)
    return float((rxy - rxz * ryz) / np.sqrt((1 - rxz**2) * (1 - ryz**2)))


def _plot(norms: np.ndarray, entropy: np.ndarray, ambiguous: np.ndarray, title: str, path: Path) -> None:
    fig, (a1, a2) = figures.subplots(1, 2, figsize=(8.4, 3.4))
    a1.scatter(entropy, norms, s=3, alpha=0.3, color="C0")
    edges = np.unique(np.quantile(entropy, np.linspace(0, 1, 11)))
    if len(edges) > 2:
        idx = np.clip(np.searchsorted(edges, entropy, side="right") - 1, 0, len(edges) - 2)
        centres = [entropy[idx == b].mean() for b in range(len(edges) - 1) if (idx == b).any()]
        means = [norms[idx == b].mean() for b in range(len(edges) - 1) if (idx == b).any()]
        a1.plot(centres, means, color="C3", marker="o", label="mean per entropy decile")
        a1.legend(fontsize=8)
    a1.set_xlabel("entropy of the label distribution (nats)")
    a1.set_ylabel("‖φ(x)‖ (pre-normalisation)")
    bins = np.linspace(norms.min(), norms.max(), 30)
    for mask, label in ((~ambiguous, "unambiguous"), (ambiguous, "ambiguous")):
        if mask.any():  # a density of no values is undefined
            a2.hist(norms[mask], bins=bins, alpha=0.6, density=True, label=f"{label} ({mask.sum()})")
    a2.set_xlabel("‖φ(x)‖")
    a2.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)


def run(config: Config, out_dir: Path) -> dict:
    """Train the encoder, then relate its norms to the label uncertainty of the evaluation images."""
    c = config
    if not 0 < c.ambiguous_max_prob < 1:
        raise ValueError(f"ambiguous_max_prob must lie in (0, 1), got {c.ambiguous_max_prob}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, ev, data_name = _load(c)
    encoder, final_loss = _train(train, c, out)
    device = resolve_device(c.device)

    q = extract_features(encoder, ev.images, 512, device=device).double()  # (N, D) pre-normalisation
    corpus_ds = train.subset(torch.arange(min(c.corpus_size, len(train))))
    corpus = extract_features(encoder, corpus_ds, 512, device=device).double()
    norms = q.norm(dim=1).numpy()
    entropy = ev.entropy.numpy()
    max_prob = ev.probs.max(1).values.numpy()
    ambiguous = max_prob <= c.ambiguous_max_prob
    msp = softmax_search_confidence(q, corpus, temperature=c.temperature, corpus_labels=corpus_ds.labels).numpy()

    # control: a blend w·x_a + (1 − w)·x_b has less pixel contrast than a clean image, so the encoder norm could
    # merely follow the input's norm; report that correlation and the partial correlation without it
    pixel_norm = ev.images.to(torch.float64).flatten(1).norm(dim=1).numpy() / (
        255.0 if ev.images.dtype == torch.uint8 else 1.0
    )
    rho_pixel = spearman(pixel_norm, entropy)
    rho_partial = partial_spearman(norms, entropy, pixel_norm)
    rng = np.random.default_rng(c.seed)
    rho = spearman_bootstrap(norms, entropy, n_boot=c.n_boot, rng=rng)
    rho_msp = spearman_bootstrap(1 - msp, entropy, n_boot=c.n_boot, rng=rng)
    both = 0 < ambiguous.sum() < len(ambiguous)
    au_norm = auroc(-norms, ambiguous) if both else float("nan")
    au_msp = auroc(1 - msp, ambiguous) if both else float("nan")

    rep = calibration_report(
        q, ev.labels, corpus, corpus_ds.labels, temperature=c.temperature, rng=stream_rng(c.seed, "calibration_split")
    )
    plot_reliability(rep, out / "reliability.png", title=f"{data_name}: top-1 retrieval of the evaluation images")
    _plot(norms, entropy, ambiguous, f"{data_name}: {ev.description}", out / "norm_vs_entropy.png")

    metrics: dict[str, float] = {
        "spearman_norm_entropy": rho[0],
        "spearman_norm_entropy_low": rho[1],
        "spearman_norm_entropy_high": rho[2],
        "spearman_1_minus_msp_entropy": rho_msp[0],
        "spearman_pixel_norm_entropy": rho_pixel,
        "spearman_norm_pixel_norm": spearman(norms, pixel_norm),
        "partial_spearman_norm_entropy_given_pixel_norm": rho_partial,
        "auroc_low_norm_ambiguous": au_norm,
        "auroc_1_minus_msp_ambiguous": au_msp,
        "ambiguous_fraction": float(ambiguous.mean()),
        "top1_accuracy": rep.accuracy,
        "final_loss": final_loss,
    }
    for s in rep.scores:
        metrics[f"retrieval/{s.name}/auroc"] = s.auroc
        metrics[f"retrieval/{s.name}/ece_isotonic"] = s.ece_isotonic
        if s.ece_raw is not None:
            metrics[f"retrieval/{s.name}/ece_raw"] = s.ece_raw

    sign = "negative, as predicted" if rho[2] < 0 else ("positive, against the prediction" if rho[1] > 0 else
                                                         "not distinguishable from 0")  # fmt: skip
    by = {s.name: s for s in rep.scores}
    summary = (
        f"{c.encoder} (width {c.width}, {c.embed_dim}-D) trained with NT-Xent (τ={c.temperature}, {c.steps} steps, "
        f"batch {c.batch_size}, regime {c.regime}) on {data_name} ({len(train)} images); evaluation: {len(q)} images, "
        f"{ev.description}; {ambiguous.mean() * 100:.1f}% ambiguous (top label share ≤ {c.ambiguous_max_prob}). "
        f"Spearman ρ(‖φ(x)‖, label entropy) = {rho[0]:.3f} [95% bootstrap {rho[1]:.3f}, {rho[2]:.3f}]: {sign}; "
        f"the baseline 1 − MSP gives ρ = {rho_msp[0]:.3f}; the input's pixel norm alone gives ρ = {rho_pixel:.3f}, and "
        f"with it partialled out the norm's ρ is {rho_partial:.3f}. AUROC of the low norm for ambiguous images "
        f"{au_norm:.3f} (1 − MSP: {au_msp:.3f}; 0.5 = chance). Top-1 retrieval against {len(corpus)} training "
        f"images: accuracy {rep.accuracy:.3f}; AUROC for correctness norm {by['norm'].auroc:.3f}, MSP "
        f"{by['msp'].auroc:.3f}, norm-temperature MSP {by['msp_norm_temperature'].auroc:.3f}; ECE after isotonic "
        f"{by['norm'].ece_isotonic:.3f} / {by['msp'].ece_isotonic:.3f} / {by['msp_norm_temperature'].ece_isotonic:.3f}."
    )
    if data_name != "cifar10":
        summary += (
            " Digits with synthetic blends stand in for CIFAR-10H here (its files were not found): the "
            "uncertainty is a known mixing weight, not human disagreement."
        )
    tables: list[dict[str, Any]] = [
        {
            "title": "Uncertainty signals against the entropy of the label distribution",
            "columns": ["signal", "Spearman ρ with entropy", "ρ low", "ρ high", "AUROC for ambiguous"],
            "rows": [
                ["low norm (−‖φ(x)‖)", -rho[0], -rho[2], -rho[1], au_norm],
                ["1 − MSP (softmax search)", rho_msp[0], rho_msp[1], rho_msp[2], au_msp],
                ["low norm, pixel norm partialled out", -rho_partial, None, None, None],
                [
                    "low pixel norm of the input (control)",
                    -rho_pixel,
                    None,
                    None,
                    auroc(-pixel_norm, ambiguous) if both else float("nan"),
                ],  # fmt: skip
            ],
        },
        rep.table("Confidence for top-1 retrieval correctness of the evaluation images (test half)"),
    ]
    return {
        "summary": summary,
        "metrics": metrics,
        "tables": tables,
        "figures": [
            {
                "file": "norm_vs_entropy.png",
                "caption": "Pre-normalisation norm against the entropy of the label distribution (red: mean per "
                "entropy decile), and norm histograms of ambiguous vs unambiguous images.",
            },  # fmt: skip
            {
                "file": "reliability.png",
                "caption": "Reliability of norm, MSP and norm-temperature MSP for top-1 "
                "retrieval correctness (isotonic map fitted on the other half).",
            },  # fmt: skip
        ],
    }
