"""Experiment ``augmentation-diversity``: does the encoder architecture matter more when augmentations are less diverse?

Claim under test (Zaliaduonis et al., "The Loss Is Not Enough", ICML 2026, arXiv 2606.04280, §5): the
InfoNCE optimum identifies the latents only when positive pairs are diverse enough (Def. 3.1); when they
are not, what is learned depends on the encoder's inductive bias. Their CIFAR-10 test: SimCLR pre-training
under three augmentation regimes — *All* (crop, flip, colour jitter, grayscale, blur, cutout), *Crop only*,
*All w/o crop* — for a CIFAR ResNet-18, a ViT with 4×4 patches and an MLP of comparable size (≈ 11 M
parameters), then a frozen linear probe. Their figure (read off, %): ResNet-18 56/37/33, ViT 54/41/32,
MLP 42/43/31 (All/Crop/w-o crop).

Here: the same protocol (``nt_xent``, i.e. SimCLR's symmetric InfoNCE over 2N views; Adam; a projection head;
the probe on the encoder's representation) for every (regime, encoder, seed), reported as mean ± 95%
t-interval over seeds. The data set is CIFAR-10 when its files are under ``data_root``, else scikit-learn's
bundled 8×8 digits with scaled-down encoders of matched parameter count. The claim is checked through the
spread across architectures (best − worst mean probe accuracy) per regime, computed seed by seed so it
gets an interval, and the ranking of the architectures per regime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab.data import ImageDataset, TwoViewBatches, augmentation_regime, load_cifar10, load_digits
from contrastlab.data.registry import dataset_available, default_data_root
from contrastlab.eval.probe import MeanCI, extract_features, linear_probe, mean_ci
from contrastlab.losses import nt_xent
from contrastlab.models import ContrastiveModel, ImageMLP, ProjectionHead, ResNet18, TinyViT, count_parameters
from contrastlab.train import OptimConfig, TrainConfig, fit, resolve_device

__all__ = ["Config", "QUICK", "FULL_CIFAR10", "PAPER_CIFAR10", "REGIME_LABELS", "build_encoder", "step_flops", "run"]

REGIME_LABELS = {"simclr_all": "All", "crop_only": "Crop only", "all_without_crop": "All w/o crop"}
"""Regime key of :data:`contrastlab.data.REGIMES` → the paper's name."""

PAPER_CIFAR10: dict[str, dict[str, float]] = {
    "resnet18": {"simclr_all": 0.56, "crop_only": 0.37, "all_without_crop": 0.33},
    "vit": {"simclr_all": 0.54, "crop_only": 0.41, "all_without_crop": 0.32},
    "mlp": {"simclr_all": 0.42, "crop_only": 0.43, "all_without_crop": 0.31},
}
"""Zaliaduonis et al. 2026 (arXiv 2606.04280), §5: CIFAR-10 linear-probe accuracies (approximate, read off a figure)."""

ENCODER_LABELS = {"resnet18": "ResNet-18", "vit": "ViT", "mlp": "MLP"}


@dataclass(frozen=True)
class Config:
    """Settings of ``augmentation-diversity``. Defaults: digits, scaled-down encoders (≈ 45 k parameters each)."""

    dataset: str = "auto"
    """'auto' (CIFAR-10 when its files are under data_root, else digits), 'digits' or 'cifar10'"""
    data_root: str = ""
    """folder holding cifar-10-batches-py/ ('' = $CONTRASTLAB_DATA or ./data)"""
    digits_size: int = 8
    """side of the digits images (8 native, 16 or 32 upsampled); CIFAR-10 is always 32"""
    train_subset: int = 0
    """pre-train and fit the probe on the first n training images (0 = all)"""
    test_subset: int = 0
    """evaluate the probe on the first n test images (0 = all)"""
    encoders: tuple[str, ...] = ("resnet18", "vit", "mlp")
    """encoders to compare: 'resnet18', 'vit', 'mlp'"""
    regimes: tuple[str, ...] = ("simclr_all", "crop_only", "all_without_crop")
    """augmentation regimes (keys of contrastlab.data.REGIMES)"""
    resnet_width: int = 4
    """CIFAR ResNet-18 first-stage width (64 ≈ 11.2 M parameters)"""
    vit_width: int = 32
    """ViT token width (384 with depth 6 ≈ 10.9 M parameters)"""
    vit_depth: int = 3
    """ViT blocks"""
    vit_patch: int = 2
    """ViT patch side (4 on 32×32 CIFAR-10, as in the paper)"""
    mlp_width: int = 160
    """MLP hidden width, two hidden layers (2048 ≈ 11.5 M parameters on CIFAR-10)"""
    embed_dim: int = 64
    """representation dimension (the paper: 512); the probe reads it"""
    proj_dim: int = 32
    """projection-head output (SimCLR: 128); 0 = no head, the loss sees the representation"""
    steps: int = 1500
    """optimiser steps per run"""
    batch_size: int = 256
    """images per batch (2N = 2·batch views)"""
    temperature: float = 0.5
    """NT-Xent temperature τ (paper: 0.5)"""
    lr: float = 3e-4
    """Adam step size (paper: 3e-4)"""
    crop_scale_min: float = 0.08
    """smallest area fraction of the random resized crop"""
    jitter_strength: float = 0.5
    """colour-jitter strength s (SimCLR CIFAR: 0.5)"""
    probe_epochs: int = 100
    """L-BFGS iterations of the linear probe"""
    probe_weight_decay: float = 1e-3
    """L2 penalty of the linear probe"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """encoder/augmentation seeds (the paper: 5 runs)"""
    device: str = "auto"
    """'auto' (CUDA when available), 'cpu' or 'cuda'"""
    precision: str = "fp32"
    """'fp32', 'bf16' or 'fp16' (autocast in contrastlab.train.fit; bf16 for the full protocol on a GPU)"""


QUICK = Config(steps=250, batch_size=128, lr=1e-3, seeds=(0, 1, 2))
"""Measured 199 s CPU on one thread (≈ 3.5 min wall on idle cores); numbers in docs/real_images.md."""

FULL_CIFAR10 = Config(
    dataset="cifar10",
    encoders=("resnet18", "vit", "mlp"),
    resnet_width=64,
    vit_width=384,
    vit_depth=6,
    vit_patch=4,
    mlp_width=2048,
    embed_dim=512,
    proj_dim=128,
    steps=5000,  # 200 epochs × ⌊50000 / 2000⌋ = 25 steps
    batch_size=2000,
    seeds=(0, 1, 2, 3, 4),
    device="cuda",
    precision="bf16",
)
"""The paper's protocol: 200 epochs at batch 2000, τ = 0.5, Adam 3e-4, ≈ 11 M-parameter encoders, 5 runs."""


def build_encoder(name: str, channels: int, image_size: int, c: Config) -> nn.Module:
    """The encoder ``name`` at the widths of ``c``: ``(B, C, H, W)`` → ``(B, embed_dim)``.

    Raises:
        ValueError: an unknown ``name``.
    """
    if name == "resnet18":
        return ResNet18(channels, image_size, c.embed_dim, c.resnet_width)
    if name == "vit":
        return TinyViT(channels, image_size, c.embed_dim, c.vit_width, depth=c.vit_depth, patch_size=c.vit_patch)
    if name == "mlp":
        return ImageMLP(channels, image_size, c.embed_dim, c.mlp_width)
    raise ValueError(f"encoders must name 'resnet18', 'vit' or 'mlp', got {name!r}")


def _model(name: str, channels: int, image_size: int, c: Config, seed: int) -> ContrastiveModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        enc = build_encoder(name, channels, image_size, c)
        head: nn.Module = ProjectionHead(c.embed_dim, c.proj_dim) if c.proj_dim > 0 else nn.Identity()
        return ContrastiveModel(enc, head)


def step_flops(name: str, c: Config, *, channels: int = 3, image_size: int = 32) -> int:
    """FLOPs of one training step (forward + backward over ``2·batch_size`` views) of encoder + head.

    Counted by ``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device (shapes only, nothing
    is computed): matmuls, convolutions and attention, 2 FLOPs per multiply–add; element-wise ops, norms
    and the loss's ``(2N)²`` similarity matrix are not counted. The loss adds ``≈ 2·(2N)²·proj_dim·3``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = _model(name, channels, image_size, c, 0)
        x = torch.empty(2 * c.batch_size, channels, image_size, image_size)
    counter = FlopCounterMode(display=False)
    with counter:
        model(x).sum().backward()
    return int(counter.get_total_flops())


GPU_PEAK_BF16 = {"A100": 312e12, "H100": 989e12}
"""Dense bf16 tensor-core peaks (FLOP/s) of NVIDIA A100 (SXM/PCIe) and H100 SXM, from NVIDIA's data sheets."""
ASSUMED_UTILISATION = 0.4
"""Fraction of peak assumed achieved in the runtime estimate (model FLOPs utilisation)."""


def _full_protocol_cost(name: str) -> list[Any]:
    c = FULL_CIFAR10
    flops = step_flops(name, c)
    run_flops = flops * c.steps
    minutes = [run_flops / (ASSUMED_UTILISATION * GPU_PEAK_BF16[g]) / 60 for g in ("A100", "H100")]
    with torch.device("meta"):  # shapes only: nothing is allocated
        n = count_parameters(build_encoder(name, 3, 32, c))
    return [ENCODER_LABELS[name], n, flops / 1e12, run_flops / 1e15, *minutes]


def _load(c: Config) -> tuple[ImageDataset, ImageDataset, str]:
    root = Path(c.data_root) if c.data_root else default_data_root()
    name = c.dataset
    if name == "auto":
        name = "cifar10" if dataset_available("cifar10", root, "train") else "digits"
    if name == "cifar10":
        train, test = load_cifar10(root, "train"), load_cifar10(root, "test")
    elif name == "digits":
        train, test = load_digits("train", image_size=c.digits_size), load_digits("test", image_size=c.digits_size)
    else:
        raise ValueError(f"dataset must be 'auto', 'digits' or 'cifar10', got {c.dataset!r}")
    if c.train_subset:
        train = train.subset(torch.arange(min(c.train_subset, len(train))))
    if c.test_subset:
        test = test.subset(torch.arange(min(c.test_subset, len(test))))
    return train, test, name


def _check(c: Config) -> None:
    from contrastlab.data import REGIMES

    for r in c.regimes:
        if r not in REGIMES:
            raise ValueError(f"regimes must be keys of {tuple(REGIMES)}, got {r!r}")
    for e in c.encoders:
        if e not in ENCODER_LABELS:
            raise ValueError(f"encoders must name 'resnet18', 'vit' or 'mlp', got {e!r}")
    if not c.seeds:
        raise ValueError("seeds must hold at least one seed")
    if c.steps < 1 or c.batch_size < 2:
        raise ValueError(f"steps must be >= 1 and batch_size >= 2, got {c.steps} and {c.batch_size}")


def _pretrain_and_probe(
    enc: str, regime: str, seed: int, train: ImageDataset, test: ImageDataset, c: Config, out: Path
) -> dict[str, float]:
    device = resolve_device(c.device)
    channels, size = train.channels, train.image_size
    model = _model(enc, channels, size, c, seed)
    aug = augmentation_regime(regime, size, crop_scale=(c.crop_scale_min, 1.0), strength=c.jitter_strength)
    batches = TwoViewBatches(train, aug, min(c.batch_size, len(train)), seed, device=device)

    def loss_fn(m: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        a, b, _ = batch
        return nt_xent(m(a), m(b), temperature=c.temperature)

    cfg = TrainConfig(
        steps=c.steps,
        seed=seed,
        device=str(device),
        precision=c.precision,  # type: ignore[arg-type]  # checked by TrainConfig
        progress=False,
        log_every=max(1, c.steps // 20),
        optim=OptimConfig(name="adam", lr=c.lr),
    )
    res = fit(model, loss_fn, batches.batch_at, cfg, out_dir=out / "train" / f"{enc}_{regime}_s{seed}")
    trained = res.model
    assert isinstance(trained, ContrastiveModel)
    encoder = trained.encoder
    acc = _probe(encoder, train, test, c, device)
    return {"linear_acc": acc, "final_loss": float(res.history[-1]["loss"]), "seconds": res.seconds}


def _probe(encoder: nn.Module, train: ImageDataset, test: ImageDataset, c: Config, device: torch.device) -> float:
    f_tr = extract_features(encoder, train, 512, device=device)
    f_te = extract_features(encoder, test, 512, device=device)
    return linear_probe(
        f_tr, train.labels, f_te, test.labels, epochs=c.probe_epochs, weight_decay=c.probe_weight_decay
    ).accuracy


def _spread(acc: dict[tuple[str, str, int], float], regime: str, encoders: tuple[str, ...], seed: int) -> float:
    vals = [acc[(e, regime, seed)] for e in encoders]
    return max(vals) - min(vals)


def _plot(summary: dict[tuple[str, str], MeanCI], c: Config, data_name: str, path: Path, *, with_paper: bool) -> None:
    panels = 2 if with_paper else 1
    fig, axes = figures.subplots(1, panels, figsize=(4.6 * panels, 3.6), squeeze=False, sharey=False)
    x = np.arange(len(c.regimes))
    labels = [REGIME_LABELS[r] for r in c.regimes]
    colours = {"resnet18": "C0", "vit": "C1", "mlp": "C2"}
    ax = axes[0][0]
    for e in c.encoders:
        m = np.array([summary[(e, r)].mean for r in c.regimes]) * 100
        h = np.array([summary[(e, r)].half_width for r in c.regimes]) * 100
        ax.errorbar(x, m, yerr=np.nan_to_num(h), marker="o", capsize=3, color=colours[e], label=ENCODER_LABELS[e])
    ax.set_title(f"ours: {data_name}, {len(c.seeds)} seeds, {c.steps} steps", fontsize=9)
    ax.set_ylabel("linear-probe accuracy (%)")
    if with_paper:
        ax2 = axes[0][1]
        for e in c.encoders:
            ax2.plot(x, [PAPER_CIFAR10[e][r] * 100 for r in c.regimes], marker="s", ls="--", color=colours[e],
                     label=ENCODER_LABELS[e])  # fmt: skip
        ax2.set_title("paper 4: CIFAR-10, 200 epochs (read from figure)", fontsize=9)
    for a in axes[0]:
        a.set_xticks(x, labels)
        a.set_xlabel("augmentation regime")
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)


def _fmt(ci: MeanCI) -> str:
    return ci.format(100, 1) if ci.n > 1 else f"{ci.mean * 100:.1f}"


class RunRow(NamedTuple):
    """One pre-training run (encoder, regime, seed) and its frozen linear-probe accuracy."""

    encoder: str
    regime: str
    seed: int
    linear_acc: float
    final_loss: float
    train_seconds: float


#: Column headers of the table of :class:`RunRow` records, in field order.
RUN_COLUMNS = ["encoder", "regime", "seed", "linear acc", "final loss", "train seconds"]


class SpreadRow(NamedTuple):
    """Spread across architectures (best − worst mean accuracy) in one regime, ours beside the paper's."""

    regime: str
    spread: float
    spread_half_width: float
    """half-width of the 95% t-interval over seeds"""
    ranking: str
    paper_spread: float
    paper_ranking: str


#: Column headers of the table of :class:`SpreadRow` records, in field order.
SPREAD_COLUMNS = ["regime", "ours spread", "ours ±", "ours ranking", "paper spread", "paper ranking"]


def run(config: Config, out_dir: Path) -> dict:
    """Pre-train every (encoder, regime, seed), probe it, and compare the spreads across architectures."""
    c = config
    _check(c)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, test, data_name = _load(c)
    channels, size = train.channels, train.image_size

    acc: dict[tuple[str, str, int], float] = {}
    rows: list[RunRow] = []
    for e in c.encoders:
        for r in c.regimes:
            for s in c.seeds:
                res = _pretrain_and_probe(e, r, s, train, test, c, out)
                acc[(e, r, s)] = res["linear_acc"]
                rows.append(RunRow(ENCODER_LABELS[e], REGIME_LABELS[r], s, res["linear_acc"], res["final_loss"],
                                   res["seconds"]))  # fmt: skip
    summary = {(e, r): mean_ci([acc[(e, r, s)] for s in c.seeds]) for e in c.encoders for r in c.regimes}

    # baselines: a probe on raw pixels and on each randomly initialised encoder (seed 0, no training)
    device = resolve_device(c.device)
    baselines = {"raw pixels": _probe(nn.Flatten(), train, test, c, torch.device("cpu"))}
    for e in c.encoders:
        baselines[f"random {ENCODER_LABELS[e]}"] = _probe(_model(e, channels, size, c, 0).encoder.to(device),
                                                          train, test, c, device)  # fmt: skip

    metrics: dict[str, float] = {}
    for (e, r), ci in summary.items():
        metrics[f"{e}/{r}/linear_acc"] = ci.mean
        metrics[f"{e}/{r}/linear_acc_half_width"] = ci.half_width
    n_params = {e: count_parameters(_model(e, channels, size, c, 0).encoder) for e in c.encoders}
    for e, n in n_params.items():
        metrics[f"{e}/encoder_parameters"] = float(n)
    for k, v in baselines.items():
        metrics[f"baseline/{k.replace(' ', '_')}"] = v

    # spread across architectures, seed by seed (the same seed index for every architecture)
    spreads = {r: mean_ci([_spread(acc, r, c.encoders, s) for s in c.seeds]) for r in c.regimes}
    for r, ci in spreads.items():
        metrics[f"spread/{r}"] = ci.mean
    spread_rows: list[SpreadRow] = []
    for r in c.regimes:
        ranking = sorted(c.encoders, key=lambda e: -summary[(e, r)].mean)
        paper = [PAPER_CIFAR10[e][r] for e in c.encoders]
        paper_rank = sorted(c.encoders, key=lambda e: -PAPER_CIFAR10[e][r])
        spread_rows.append(SpreadRow(REGIME_LABELS[r], spreads[r].mean, spreads[r].half_width,
                                     " > ".join(ENCODER_LABELS[e] for e in ranking), max(paper) - min(paper),
                                     " > ".join(ENCODER_LABELS[e] for e in paper_rank)))  # fmt: skip
    verdict = ""
    if "simclr_all" in c.regimes and len(c.encoders) > 1:
        limited = [r for r in c.regimes if r != "simclr_all"]
        parts = []
        for r in limited:
            diffs = [_spread(acc, r, c.encoders, s) - _spread(acc, "simclr_all", c.encoders, s) for s in c.seeds]
            d = mean_ci(diffs)
            metrics[f"spread_minus_all/{r}"] = d.mean
            if d.n > 1 and d.low > 0:
                word = "larger than under All (interval excludes 0): supports the claim"
            elif d.n > 1 and d.high < 0:
                word = "smaller than under All (interval excludes 0): contradicts the claim"
            else:
                word = "not distinguishable from the spread under All: inconclusive"
            parts.append(f"under {REGIME_LABELS[r]} the spread is {spreads[r].mean * 100:.1f} points, "
                         f"{d.mean * 100:+.1f} ± {(d.half_width if d.n > 1 else math.nan) * 100:.1f} against All, "
                         f"{word}")  # fmt: skip
        paper_spread = {r: max(PAPER_CIFAR10[e][r] for e in PAPER_CIFAR10) - min(PAPER_CIFAR10[e][r]
                        for e in PAPER_CIFAR10) for r in REGIME_LABELS}  # fmt: skip
        verdict = (
            f"Spread across architectures (best − worst, seed by seed; under All {spreads['simclr_all'].mean * 100:.1f} "
            "points): "
            + "; ".join(parts)
            + ". For reference, the paper's own CIFAR-10 figures give spreads of "
            + ", ".join(f"{REGIME_LABELS[r]} {v * 100:.0f}" for r, v in paper_spread.items())
            + " points: the spread there is largest under All; what changes under limited diversity is the "
            "ranking (the MLP, last under All, is first under Crop only), i.e. which inductive bias wins."
        )

    lines = "; ".join(
        f"{ENCODER_LABELS[e]}: " + ", ".join(f"{REGIME_LABELS[r]} {_fmt(summary[(e, r)])}" for r in c.regimes)
        for e in c.encoders
    )
    with_paper = set(c.encoders) <= set(PAPER_CIFAR10) and set(c.regimes) <= set(REGIME_LABELS)
    _plot(summary, c, data_name, out / "augmentation_diversity.png", with_paper=with_paper)
    summary_text = (
        f"SimCLR pre-training (NT-Xent, τ={c.temperature}, Adam {c.lr:g}, batch {c.batch_size}, {c.steps} steps) on "
        f"{data_name} ({len(train)} train / {len(test)} test images, {channels}×{size}×{size}) under "
        f"{len(c.regimes)} augmentation regimes for {len(c.encoders)} encoders of "
        + ", ".join(f"{n_params[e] / 1e3:.1f} k" for e in c.encoders)
        + f" parameters; frozen linear probe, {len(c.seeds)} seeds, accuracy % mean ± 95% t-interval: {lines}. "
        f"Baselines: " + ", ".join(f"{k} {v * 100:.1f}" for k, v in baselines.items()) + ". " + verdict
    )
    if data_name != "cifar10":
        summary_text += (
            " These are digits, not CIFAR-10: the absolute numbers are not comparable with the paper's, and "
            "8×8 digits are close to linearly separable in pixel space (see the raw-pixel baseline)."
        )
    tables = [
        {
            "title": "Linear-probe accuracy (mean ± 95% interval over seeds) beside the paper's CIFAR-10 figure",
            "columns": ["encoder", "regime", "ours mean", "ours ±", "paper (CIFAR-10)", "parameters"],
            "rows": [
                [
                    ENCODER_LABELS[e],
                    REGIME_LABELS[r],
                    summary[(e, r)].mean,
                    summary[(e, r)].half_width,
                    PAPER_CIFAR10.get(e, {}).get(r),
                    n_params[e],
                ]  # fmt: skip
                for e in c.encoders
                for r in c.regimes
            ],
        },
        {
            "title": "Spread across architectures per regime (best − worst mean accuracy) and ranking",
            "columns": SPREAD_COLUMNS,
            "rows": spread_rows,
        },
        {
            "title": "Baselines (no pre-training)",
            "columns": ["features", "linear acc"],
            "rows": [[k, v] for k, v in baselines.items()],
        },  # fmt: skip
        {
            "title": "Cost of the full CIFAR-10 protocol per run (FLOPs counted on the meta device; GPU minutes "
            "are FLOPs / (0.4 × peak bf16), an assumption, not a measurement)",
            "columns": ["encoder", "parameters", "TFLOP per step", "PFLOP per run", "A100 min", "H100 min"],
            "rows": [_full_protocol_cost(e) for e in c.encoders],
        },
        {
            "title": "Every run",
            "columns": RUN_COLUMNS,
            "rows": rows,
        },
    ]
    return {
        "summary": summary_text,
        "metrics": metrics,
        "tables": tables,
        "figures": [
            {
                "file": "augmentation_diversity.png",
                "caption": "Linear-probe accuracy by augmentation regime, one line per architecture "
                "(error bars: 95% interval over seeds); right: the paper's CIFAR-10 figure.",
            }
        ],
    }
