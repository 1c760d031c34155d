"""Identifiability on images with ground truth: does a CNN's inductive bias matter more when diversity fails?

Beyond the paper (Zaliaduonis et al. 2026 test inductive bias on CIFAR-10 without ground truth): the
procedural sprite world :class:`contrastlab.worlds.images.ImageWorld` renders latents z ∈ S^{d−1} as
small images (position, red level, size, orientation…), so positives z̃ ~ vMF(z, κ) on the whole
sphere (diversity holds) or on K(z) = {z̃ with the first ``d_fixed`` attributes unchanged} (violated)
control diversity exactly. A small CNN (:class:`contrastlab.models.SmallCNN`) and an MLP on the
flattened pixels (:class:`contrastlab.models.MLP`) are trained with InfoNCE (fresh uniform latent
negatives shared by the batch, rendered the same way) and scored by held-out linear R² and MCC of z
from the embedding. Every finished run is recorded in ``OUT/train/<encoder>__<regime>__<i>/result.json``
at once; rerunning the same command into the same folder trains only the missing runs, and a campaign
can be split over processes by ``encoders`` and ``regimes``, then tabulated by one run with all of them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab.eval.identifiability import identifiability_metrics
from contrastlab.experiments._latent_cl import aggregate, fmt_mean_sd, recorded_run, timing
from contrastlab.losses import info_nce
from contrastlab.models import MLP, SmallCNN
from contrastlab.seeds import seed_stream, stream_generator
from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator
from contrastlab.worlds.images import ImageWorld, sample_image_pairs
from contrastlab.worlds.sphere import sample_uniform_sphere

ENCODERS = ("cnn", "mlp")
REGIMES = ("full", "restricted")
_RESULT_KEYS = ("r2", "mcc", "ape", "orthogonality_error", "sec_per_step", "cpu_seconds")


@dataclass(frozen=True)
class Config:
    """Settings of the image-world comparison."""

    d: int = 5
    """latent dimension (attributes: x, y, red, size, angle)"""
    image_size: int = 16
    """image side in pixels"""
    d_fixed: int = 2
    """attributes held fixed by the restricted positives (2: position never changes)"""
    encoders: tuple[str, ...] = ENCODERS
    """encoders: cnn (SmallCNN) and/or mlp (MLP on flattened pixels)"""
    regimes: tuple[str, ...] = REGIMES
    """diversity regimes: full (positives on the whole sphere) and/or restricted (d_fixed attributes kept)"""
    cnn_width: int = 16
    """SmallCNN first-stage width"""
    mlp_hidden: tuple[int, ...] = (512, 256)
    """MLP hidden widths (ReLU and BatchNorm)"""
    mlp_norm_order: Literal["pre_act", "post_act"] = "post_act"
    """BatchNorm placement in the MLP: post_act = Linear → ReLU → BatchNorm1d (the identifiability
    paper's encoder), pre_act = Linear → BatchNorm1d → ReLU (cl-ica's order)"""
    seeds: int = 3
    """seeds per cell"""
    steps: int = 3000
    """optimiser steps per run"""
    batch_size: int = 256
    """anchors (and shared negatives) per step"""
    lr: float = 1e-3
    """Adam learning rate"""
    tau: float = 0.3
    """temperature τ; the latent vMF concentration is κ = 1/τ"""
    n_test: int = 2000
    """test images for the metrics"""
    seed: int = 0
    """first seed"""


QUICK = Config(seeds=1, steps=300, batch_size=64, cnn_width=8, mlp_hidden=(256, 128), n_test=1000)


class _Flatten(nn.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.reshape(x.shape[0], -1))


def _encoder(name: str, config: Config, world: ImageWorld) -> nn.Module:
    if name == "cnn":
        return SmallCNN(3, config.image_size, embed_dim=config.d, width=config.cnn_width)
    mlp = MLP(
        world.out_dim,
        list(config.mlp_hidden),
        config.d,
        batch_norm=True,
        activation="relu",
        norm_order=config.mlp_norm_order,
    )
    return _Flatten(mlp)


def _run_settings(config: Config, encoder: str, d_fixed: int, seed: int) -> dict[str, object]:
    """What determines one run: the config without its campaign fields, the encoder, d_fixed and the seed."""
    shared = {k: v for k, v in asdict(config).items() if k not in ("encoders", "regimes", "seeds", "seed", "d_fixed")}
    return {**shared, "encoder": encoder, "d_fixed": d_fixed, "seed": seed}


def _train_recorded(config: Config, encoder: str, d_fixed: int, seed: int, out_dir: Path) -> dict[str, float]:
    return recorded_run(
        _run_settings(config, encoder, d_fixed, seed),
        _RESULT_KEYS,
        out_dir,
        lambda: _train_one(config, encoder, d_fixed, seed, out_dir),
    )


def _train_one(config: Config, encoder: str, d_fixed: int, seed: int, out_dir: Path) -> dict[str, float]:
    world = ImageWorld(config.d, size=config.image_size)
    kappa = 1.0 / config.tau
    b = config.batch_size

    def batch_at(step: int) -> dict[str, Tensor]:
        g = step_generator(seed, step)
        _, _, x, xp = sample_image_pairs(world, b, kappa, d_fixed, generator=g)
        with torch.no_grad():
            xn = world(sample_uniform_sphere(b, config.d, generator=g))
        return {"x": torch.cat([x, xp, xn])}

    def loss_fn(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        emb = model(batch["x"])  # one pass: BatchNorm sees anchors, positives and negatives together
        return info_nce(emb[:b], emb[b : 2 * b], emb[2 * b :], temperature=config.tau)

    torch.manual_seed(seed)
    model = _encoder(encoder, config, world)
    cfg = TrainConfig(
        steps=config.steps,
        seed=seed,
        log_every=max(1, config.steps // 10),
        progress=False,
        optim=OptimConfig(name="adam", lr=config.lr),
    )
    t0, c0 = time.perf_counter(), time.process_time()
    res = fit(model, loss_fn, batch_at, cfg, out_dir=out_dir)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    z = sample_uniform_sphere(config.n_test, config.d, generator=stream_generator(seed, "test_latents"))
    with torch.no_grad():
        zh = torch.cat([res.model(world(c)) for c in z.split(500)])
    out = identifiability_metrics(z.double(), zh.double(), seed=seed)
    out["sec_per_step"] = seconds / max(config.steps, 1)
    out["cpu_seconds"] = cpu
    return out


def _plot(r2: dict[tuple[str, str], tuple[float, float]], config: Config, path: Path) -> None:
    world = ImageWorld(config.d, size=config.image_size)
    z, _, x, xp = sample_image_pairs(
        world, 6, 1.0 / config.tau, config.d_fixed, generator=torch.Generator().manual_seed(0)
    )
    fig = figures.new_figure((9, 3))
    for i in range(6):
        for row, img in enumerate((x, xp)):
            ax = fig.add_subplot(2, 10, row * 10 + i + 1)
            ax.imshow(img[i].permute(1, 2, 0).clamp(0, 1).numpy())
            ax.axis("off")
    ax = fig.add_axes((0.66, 0.15, 0.32, 0.75))
    regimes = config.regimes
    width = 0.8 / len(config.encoders)
    for k, e in enumerate(config.encoders):
        ax.bar(
            [j + width * k for j in range(len(regimes))],
            [r2[(e, r)][0] for r in regimes],
            width,
            yerr=[r2[(e, r)][1] for r in regimes],
            label=e,
        )
    labels = {"full": "full diversity", "restricted": f"d_fixed = {config.d_fixed}"}
    ticks = [j + width * (len(config.encoders) - 1) / 2 for j in range(len(regimes))]
    ax.set_xticks(ticks, [labels[r] for r in regimes])
    ax.set_ylabel("held-out R²")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    fig.text(0.02, 0.93, "anchors (top) / restricted positives (bottom)", fontsize=8)
    figures.save_png(fig, path, dpi=100)


def run(config: Config, out_dir: Path) -> dict:
    """Train each encoder under full and restricted diversity and tabulate R² and MCC."""
    for name, values, allowed in (("encoders", config.encoders, ENCODERS), ("regimes", config.regimes, REGIMES)):
        if not values or len(set(values)) != len(values):
            raise ValueError(f"{name} must name at least one of {allowed}, each once, got {values!r}")
        for v in values:
            if v not in allowed:
                raise ValueError(f"{name} must be among {allowed}, got {v!r}")
    if not 1 <= config.d_fixed < config.d:
        raise ValueError(f"d_fixed must lie in [1, d) = [1, {config.d}), got {config.d_fixed}")
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    regimes = {r: m for r, m in (("full", 0), ("restricted", config.d_fixed)) if r in config.regimes}
    res = {
        (e, r): [
            _train_recorded(
                config, e, m, seed_stream(config.seed, "repetition", s), out_dir / "train" / f"{e}__{r}__{s}"
            )
            for s in range(config.seeds)
        ]
        for e in config.encoders
        for r, m in regimes.items()
    }
    total = time.perf_counter() - t0
    r2 = {k: aggregate(v, "r2") for k, v in res.items()}
    rows = [
        [
            e,
            r,
            fmt_mean_sd(*r2[(e, r)]),
            ", ".join(f"{run['r2']:.3f}" for run in res[(e, r)]),
            fmt_mean_sd(*aggregate(res[(e, r)], "mcc")),
            ", ".join(f"{run['mcc']:.3f}" for run in res[(e, r)]),
            fmt_mean_sd(*aggregate(res[(e, r)], "ape")),
            round(1000 * aggregate(res[(e, r)], "sec_per_step")[0], 1),
        ]
        for e in config.encoders
        for r in regimes
    ]
    _plot(r2, config, out_dir / "image_identifiability.png")
    metrics = {f"r2/{e}/{r}": v[0] for (e, r), v in r2.items()}
    metrics.update({f"mcc/{e}/{r}": aggregate(v, "mcc")[0] for (e, r), v in res.items()})
    metrics.update(timing(res, total))
    desc = "; ".join(f"{e}: " + ", ".join(f"{r} {r2[(e, r)][0]:.2f}" for r in regimes) for e in config.encoders)
    summary = (
        f"Sprite world (d = {config.d}, {config.image_size}×{config.image_size} px), InfoNCE τ = {config.tau}, "
        f"{config.seeds} seed(s) × {config.steps} steps, batch {config.batch_size}; restricted positives keep the "
        f"first {config.d_fixed} attributes (position). Held-out linear R² — {desc}. {total:.0f} s wall in this "
        f"call; {metrics['cpu_seconds']:.0f} s CPU of training over all runs, recorded ones included."
    )
    return {
        "summary": summary,
        "metrics": metrics,
        "tables": [
            {
                "title": "Image world: held-out R², MCC and APE by encoder and diversity regime",
                "columns": ["encoder", "diversity", "R²", "R² per seed", "MCC", "MCC per seed", "APE", "ms/step"],
                "rows": rows,
            }
        ],
        "figures": [
            {"file": "image_identifiability.png", "caption": "Sprites with restricted positives; R² by encoder."}
        ],
    }
