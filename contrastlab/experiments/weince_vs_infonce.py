"""Experiment ``weince-vs-infonce``: does the extreme-value correction beat plain InfoNCE (NT-Xent)?

Claim under test (Erol et al., "When Softmax Fails at the Top", ICML 2026, arXiv 2606.00262): SimCLR
pre-training with WEINCE, whose logits blend s/τ with the Weibit logit −β log(1 − s) on anchors whose
hardest negatives sit near the cosine cap, gives better frozen features than NT-Xent (CIFAR-100/R18
linear accuracy 53.28 ± 0.28 vs 50.01 ± 0.19 in the paper).

Protocol (§2.4, scaled to the dataset): SimCLR two-view batches (``simclr_all`` augmentations; on the
8×8 grayscale digits a light crop / brightness-contrast / cutout pipeline, ``digits_augment``), an encoder + 2-layer projection head to 64 dimensions, Adam (lr 3e-4, weight decay 1e-6), τ = 0.5, the
same batches and initialisation for every loss at a given seed. Frozen encoder features (before the
head) are evaluated with a logistic-regression probe, the τ_knn = 0.1 weighted kNN classifier and kNN
recall R@k on the test split; mean ± 95% t-interval over pre-training seeds, plus the paired
WEINCE − InfoNCE difference. Baselines: raw pixels and a randomly initialised encoder (same seeds).
The EVT diagnostic (``contrastlab.eval.tails``) is run on the trained encoders' normalised projections
of the test images: a GPD fit of the top 1% of negative cosines and each anchor's Weibull-vs-Gumbel
ΔAIC.

Datasets: scikit-learn's digits (bundled; always run) and every other registered dataset whose files
are present under ``data_root`` (CIFAR-10/100, STL-10, SVHN, ImageNet-32, Tiny-ImageNet), with a
CIFAR ResNet-18 for those.

Losses: ``infonce`` (NT-Xent), ``weince`` (the paper's formula with per-anchor β̂_i, this library's
default) and ``weince-code`` (the official reproduction: β = 1 in the mixture plus 0.5·L_Weibit-top50 +
0.5·L_PL-top50 with the global EMA β_t).

Full protocol (``Config()``): 100 epochs at batch 256 (2N = 512 views), 4 seeds, all three losses.
On digits (5 steps per epoch, 500 steps per run) it runs on a CPU; on CIFAR-100 with ResNet-18 it is
19,500 steps per run: on a GPU with ``device="auto"``/``precision="bf16"`` (the loss itself always runs
in fp32). See ``docs/weince.md`` for measured runtimes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab.data import (
    DATASETS,
    Augmentation,
    ColorJitter,
    Compose,
    Cutout,
    RandomResizedCrop,
    TwoViewBatches,
    augmentation_regime,
    dataset_available,
    load_dataset,
)
from contrastlab.data.base import ImageDataset
from contrastlab.eval.probe import (
    evaluate_encoder,
    evaluate_features,
    extract_features,
    mean_ci,
    random_encoder,
    raw_pixel_features,
)
from contrastlab.eval.tails import NO_ENDPOINT, TailReport, plot_tail_diagnostics, tail_diagnostics
from contrastlab.losses import WEINCELoss, nt_xent
from contrastlab.models import ContrastiveModel, ProjectionHead, build_encoder
from contrastlab.train import OptimConfig, TrainConfig, fit

LOSSES = ("infonce", "weince", "weince-code")


@dataclass(frozen=True)
class Config:
    """Settings of ``weince-vs-infonce`` (defaults: the paper's protocol, §2.4)."""

    losses: tuple[str, ...] = LOSSES
    """losses to compare: infonce (NT-Xent), weince (paper formula), weince-code (official repro config)"""
    seeds: tuple[int, ...] = (7, 21, 63, 84)
    """pre-training seeds (initialisation, batches, augmentations); the paper's four"""
    epochs: int = 100
    """pre-training epochs (steps = epochs × ⌊train size / batch⌋)"""
    max_steps: int = 0
    """if > 0, cap the steps per run (for quick runs)"""
    batch_size: int = 256
    """images per batch N (2N views)"""
    temperature: float = 0.5
    """τ of both losses"""
    lr: float = 3e-4
    """Adam learning rate (constant, as the paper)"""
    weight_decay: float = 1e-6
    """Adam weight decay"""
    proj_dim: int = 64
    """projection-head output dimension"""
    digits_encoder: str = "cnn"
    """encoder for digits (8×8): cnn, mlp, resnet18 or vit"""
    digits_width: int = 32
    """its width knob"""
    digits_embed_dim: int = 128
    """its representation dimension"""
    image_encoder: str = "resnet18"
    """encoder for the 32×32+ datasets"""
    image_embed_dim: int = 512
    """its representation dimension"""
    digits_augment: str = "light"
    """digits views: light (crop, brightness/contrast, cutout; 8×8 grayscale has no colour to jitter) or simclr_all"""
    crop_scale: tuple[float, float] = (0.3, 1.0)
    """random-resized-crop area range (8×8 digits cannot take SimCLR's 0.08)"""
    jitter_strength: float = 0.5
    """SimCLR colour-jitter strength s"""
    margin: float = 2.0
    """WEINCE ΔAIC margin m"""
    kappa_rho: float = 10.0
    """WEINCE cap-proximity gate steepness κ_ρ"""
    kappa_aic: float = 1.0
    """WEINCE ΔAIC gate steepness κ_AIC"""
    q: float = 0.2
    """WEINCE cap-proximity pivot quantile"""
    top_m: int = 50
    """M of the weince-code auxiliary top-M terms"""
    probe_optimizer: str = "lbfgs"
    """linear probe: lbfgs (deterministic) or adam (the paper: 100 epochs, batch 256)"""
    probe_epochs: int = 100
    """probe iterations/epochs"""
    tail_quantile: float = 0.99
    """POT threshold quantile of the EVT diagnostic"""
    datasets: tuple[str, ...] = ("digits",)
    """datasets always run"""
    other_available: bool = True
    """also run every other registered dataset whose files are under data_root"""
    data_root: str = ""
    """where dataset files are looked for ('' = $CONTRASTLAB_DATA or ./data)"""
    device: str = "auto"
    """cpu, cuda or auto"""
    precision: str = "fp32"
    """autocast of the encoder: fp32, or bf16 on a GPU (the loss stays fp32)"""


QUICK = Config(
    losses=("infonce", "weince"),
    seeds=(0, 1, 2),
    epochs=60,
    lr=2e-3,
    digits_width=16,
    other_available=False,
    device="cpu",
)
"""Digits only, 3 seeds, 300 steps per run at the paper's batch (2N = 512), lr 2e-3 for the short run."""


class _Pretrainer(nn.Module):
    """The network plus the loss module, so that a loss buffer (WEINCE's EMA β_t) is checkpointed with it."""

    net: ContrastiveModel
    loss: WEINCELoss | None

    def __init__(self, net: ContrastiveModel, loss: WEINCELoss | None) -> None:
        super().__init__()
        self.net, self.loss = net, loss


def _make_loss(name: str, c: Config) -> WEINCELoss | None:
    if name == "infonce":
        return None
    if name not in LOSSES:
        raise ValueError(f"losses: unknown loss {name!r}; choose from {LOSSES}")
    code = name == "weince-code"
    return WEINCELoss(
        temperature=c.temperature,
        beta_mode="one" if code else "per_anchor",
        q=c.q,
        kappa_rho=c.kappa_rho,
        kappa_aic=c.kappa_aic,
        margin=c.margin,
        aux_top_m=c.top_m if code else 0,
        aux_weight=0.5,
    )


def _network(spec_name: str, c: Config, seed: int) -> ContrastiveModel:
    ch, size = DATASETS[spec_name].image_shape[0], DATASETS[spec_name].image_shape[1]
    if spec_name == "digits":
        name, dim, width = c.digits_encoder, c.digits_embed_dim, c.digits_width
    else:
        name, dim, width = c.image_encoder, c.image_embed_dim, None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        enc = build_encoder(name, ch, size, dim, width)
        head = ProjectionHead(dim, c.proj_dim, num_layers=2)
    return ContrastiveModel(enc, head)


def _pretrain(
    loss_name: str, data: str, train: ImageDataset, c: Config, seed: int, out_dir: Path
) -> tuple[ContrastiveModel, list[dict[str, Any]], float]:
    size = train.images.shape[-1]
    if data == "digits" and c.digits_augment == "light":
        aug: Augmentation = Compose([
            RandomResizedCrop(size, scale=c.crop_scale),
            ColorJitter(0.8 * c.jitter_strength, 0.8 * c.jitter_strength, 0.0, 0.0, p=0.8),
            Cutout(size=max(1, size // 4), p=0.5),
        ])  # fmt: skip
    else:
        aug = augmentation_regime("simclr_all", size, crop_scale=c.crop_scale, strength=c.jitter_strength)
    batches = TwoViewBatches(train, aug, min(c.batch_size, len(train)), seed=seed)
    steps = c.epochs * batches.steps_per_epoch
    if c.max_steps > 0:
        steps = min(steps, c.max_steps)
    model = _Pretrainer(_network(data, c, seed), _make_loss(loss_name, c))

    def loss_fn(m: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, dict[str, float]]:
        assert isinstance(m, _Pretrainer)
        za, zb = m.net(batch[0]), m.net(batch[1])
        if m.loss is None:
            return nt_xent(za, zb, temperature=c.temperature), {}
        loss = m.loss(za, zb)
        st = m.loss.last_stats
        assert st is not None
        return loss, {"lambda_mean": float(st.tail.lam.mean()), "beta_mean": float(st.beta.mean()),
                      "frac_weibull": float((st.tail.delta_aic > 0).float().mean())}  # fmt: skip

    cfg = TrainConfig(
        steps=steps,
        seed=seed,
        device=c.device,
        precision=c.precision,  # type: ignore[arg-type]
        log_every=max(1, steps // 20),
        progress=False,
        optim=OptimConfig(name="adam", lr=c.lr, weight_decay=c.weight_decay),
    )
    res = fit(model, loss_fn, batches.batch_at, cfg, out_dir=out_dir / f"train_{data}_{loss_name}_seed{seed}")
    assert isinstance(res.model, _Pretrainer)
    return res.model.net, res.history, res.seconds


def _fmt(values: list[float]) -> str:
    ci = mean_ci(values)
    return f"{100 * ci.mean:.2f}" if ci.n == 1 else f"{100 * ci.mean:.2f} ± {100 * ci.half_width:.2f}"


def _plot_training(histories: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    fig, axes = figures.subplots(1, 2, figsize=(10, 3.4))
    for name, hist in histories.items():
        steps = [r["step"] for r in hist]
        axes[0].plot(steps, [r["loss"] for r in hist], label=name)
        if "lambda_mean" in hist[0]:
            axes[1].plot(steps, [r["lambda_mean"] for r in hist], label=f"{name}: mean λ")
            axes[1].plot(steps, [r["frac_weibull"] for r in hist], "--", label=f"{name}: share ΔAIC>0")
    axes[0].set(xlabel="step", ylabel="training loss", title=f"{title}: training loss (seed 0 of the table)")
    axes[1].set(xlabel="step", ylim=(0, 1), title="WEINCE gate over training")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)


def _datasets(c: Config) -> list[str]:
    names = list(c.datasets)
    if c.other_available:
        root = c.data_root or None
        names += [
            n for n in DATASETS if n not in names and dataset_available(n, root) and dataset_available(n, root, "test")
        ]
    return names


class TailRow(NamedTuple):
    """The EVT diagnostics of one trained encoder's negative cosines (peaks over threshold, per anchor)."""

    encoder: str
    xi: float
    """GPD shape ξ̂ of the exceedances"""
    endpoint: float | str
    """the fitted upper endpoint u − σ/ξ when ξ̂ < 0, else the text none (ξ̂ ≥ 0)"""
    threshold: float
    """the threshold u"""
    n_exceed: int
    delta_aic: float
    """AIC of the exponential minus AIC of the GPD"""
    pct_anchors_weibull: float
    """% of anchors whose own ΔAIC favours a bounded (Weibull) tail"""
    xi_isotropic: float
    """ξ̂ of isotropic vectors of the same dimension (the reference)"""


#: Column headers of the table of :class:`TailRow` records, in field order.
TAIL_COLUMNS = ["encoder", "GPD ξ̂", "endpoint u − σ/ξ", "threshold u", "exceedances", "ΔAIC GPD vs exp",
                "% anchors ΔAIC>0", "isotropic ξ"]  # fmt: skip


def run(config: Config, out_dir: Path) -> dict:
    """Pre-train with each loss and seed on each dataset; evaluate frozen features; EVT diagnostics."""
    c = config
    for name in c.losses:
        _make_loss(name, c)  # validate names before any training
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = ["method", "linear acc %", "kNN acc@20 %", "R@1 %", "R@5 %", "R@10 %", "R@20 %", "pretrain s/run"]
    keys = ["linear_acc", "knn_acc@20", "R@1", "R@5", "R@10", "R@20"]
    tables: list[dict[str, Any]] = []
    figures: list[dict[str, str]] = []
    metrics: dict[str, float] = {}
    sentences: list[str] = []
    for data in _datasets(c):
        root = c.data_root or None
        train, test = load_dataset(data, root, "train"), load_dataset(data, root, "test")
        spec = DATASETS[data]
        ks = [k for k in (1, 2, 5, 10, 20, 50) if k < len(test)]
        eval_kw: dict[str, Any] = {"ks": ks, "probe_optimizer": c.probe_optimizer, "probe_epochs": c.probe_epochs}
        results: dict[str, list[dict[str, float]]] = {}
        seconds: dict[str, list[float]] = {}
        histories: dict[str, list[dict[str, Any]]] = {}
        tails: dict[str, TailReport] = {}

        t0 = time.perf_counter()
        raw = evaluate_features(
            raw_pixel_features(train), train.labels, raw_pixel_features(test), test.labels, **eval_kw
        )
        results["raw pixels"], seconds["raw pixels"] = [raw], [0.0]
        enc_name = c.digits_encoder if data == "digits" else c.image_encoder
        dim = c.digits_embed_dim if data == "digits" else c.image_embed_dim
        width = c.digits_width if data == "digits" else None
        results["random encoder"] = [
            evaluate_encoder(
                random_encoder(enc_name, spec.image_shape[0], train.images.shape[-1], dim, width, seed=s),
                train,
                test,
                **eval_kw,
            )  # fmt: skip
            for s in c.seeds
        ]
        seconds["random encoder"] = [0.0]
        for loss_name in c.losses:
            results[loss_name], seconds[loss_name] = [], []
            for i, seed in enumerate(c.seeds):
                net, hist, secs = _pretrain(loss_name, data, train, c, seed, out_dir)
                results[loss_name].append(evaluate_encoder(net.encoder, train, test, **eval_kw))
                seconds[loss_name].append(secs)
                if i == 0:
                    histories[loss_name] = hist
                    z = extract_features(net, test)  # the projections the loss saw, normalised in tails
                    tails[loss_name] = tail_diagnostics(z, threshold_quantile=c.tail_quantile, seed=seed)

        rows = []
        for method, runs in results.items():
            row: list[Any] = [method] + [_fmt([r[k] for r in runs]) if k in runs[0] else None for k in keys]
            row.append(round(sum(seconds[method]) / len(seconds[method]), 1))
            rows.append(row)
            for k in keys:
                if k in runs[0]:
                    metrics[f"{data}/{method}/{k}"] = sum(r[k] for r in runs) / len(runs)
        diff_rows = []
        if "infonce" in results:
            for other in (m for m in c.losses if m != "infonce"):
                row = [f"{other} − infonce"]
                for k in keys:
                    if k not in results["infonce"][0]:
                        row.append(None)
                        continue
                    d = [a[k] - b[k] for a, b in zip(results[other], results["infonce"], strict=True)]
                    row.append(_fmt(d) if len(d) > 1 else f"{100 * d[0]:+.2f}")
                    metrics[f"{data}/{other}-infonce/{k}"] = sum(d) / len(d)
                row.append(None)
                diff_rows.append(row)
        n_steps = histories[c.losses[0]][-1]["step"] if c.losses else 0
        tables.append({
            "title": f"{data}: frozen-feature evaluation on the test split, mean ± 95% t-interval over seeds "
                     f"{list(c.seeds)} ({n_steps} steps per run, batch {min(c.batch_size, len(train))})",
            "columns": columns,
            "rows": rows + diff_rows,
        })  # fmt: skip
        tail_rows: list[TailRow] = []
        for name, rep in tails.items():
            p = rep.pot
            tail_rows.append(TailRow(name, round(p.xi, 4), round(p.endpoint, 4) if p.xi < 0 else NO_ENDPOINT, round(p.threshold, 4), p.n_exceed,
                                     round(p.delta_aic, 1), round(100 * rep.frac_weibull, 1), round(rep.xi_isotropic, 4)))  # fmt: skip
            metrics[f"{data}/{name}/pot_xi"] = p.xi
            metrics[f"{data}/{name}/frac_anchor_weibull"] = rep.frac_weibull
        tables.append({
            "title": f"{data}: tail of the negative cosines of the trained projections (test images, seed {c.seeds[0]})",
            "columns": TAIL_COLUMNS,
            "rows": tail_rows,
        })  # fmt: skip
        fname = f"weince_tails_{data}.png"
        plot_tail_diagnostics(
            tails,
            out_dir / fname,
            title=f"{data}: negative-cosine tail of the trained projections (test images, seed {c.seeds[0]})",
        )
        figures.append({"file": fname, "caption": f"{data}: EVT diagnostic per loss: GPD QQ plot of the top {100 * (1 - c.tail_quantile):.0f}% "
                        "of negative cosines, exceedances with the fitted GPD and exponential, per-anchor Weibull−Gumbel ΔAIC."})  # fmt: skip
        fname = f"weince_training_{data}.png"
        _plot_training(histories, out_dir / fname, data)
        figures.append(
            {
                "file": fname,
                "caption": f"{data}: training loss and WEINCE's gate (mean λ_i, share of anchors with ΔAIC > 0).",
            }
        )

        lin = {m: metrics.get(f"{data}/{m}/linear_acc", math.nan) for m in results}
        parts = [f"{m} {100 * v:.2f}%" for m, v in lin.items()]
        verdict = ""
        if "infonce" in results and "weince" in results:
            d = [a["linear_acc"] - b["linear_acc"] for a, b in zip(results["weince"], results["infonce"], strict=True)]
            ci = mean_ci(d)
            if ci.n > 1 and ci.low > 0:
                verdict = f"WEINCE beats InfoNCE by {100 * ci.mean:.2f} ± {100 * ci.half_width:.2f} points (95% CI excludes 0)"
            elif ci.n > 1 and ci.high < 0:
                verdict = f"InfoNCE beats WEINCE by {-100 * ci.mean:.2f} ± {100 * ci.half_width:.2f} points (95% CI excludes 0)"
            else:
                verdict = (
                    f"the WEINCE − InfoNCE difference is {100 * ci.mean:+.2f} points, not significant over {ci.n} seeds"
                )
        best = max((m for m in c.losses), key=lambda m: lin[m]) if c.losses else ""
        rand = lin.get("random encoder", math.nan)
        sentences.append(
            f"**{data}** ({len(c.seeds)} seeds, {n_steps} steps/run, {time.perf_counter() - t0:.0f} s): linear probe "
            f"{', '.join(parts)}; {verdict}. Best contrastive loss: {best}; it "
            f"{'beats' if lin.get(best, math.nan) > rand else 'does not beat'} the random encoder ({100 * rand:.2f}%). "
            + "; ".join(f"{n}: GPD ξ̂ = {r.pot.xi:.3f}, {100 * r.frac_weibull:.0f}% of anchors favour Weibull"
                        for n, r in tails.items()) + "."
        )  # fmt: skip

    summary = (
        "SimCLR pre-training with NT-Xent (InfoNCE) and WEINCE (Erol et al. 2026) on the same batches and "
        "initialisations, evaluated by a linear probe, weighted kNN and kNN recall on frozen features. "
        + " ".join(sentences)
    )
    return {"summary": summary, "metrics": metrics, "tables": tables, "figures": figures}
