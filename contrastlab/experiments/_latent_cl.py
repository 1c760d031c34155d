"""Shared training routine of the identifiability experiments (not an experiment itself).

One run = one (generator, encoder, restriction, loss) cell of Zaliaduonis et al. (2026), §5:
latents z ~ U(S^{d−1}); positives z̃ ~ P^K(·|z) with ``d_fixed`` coordinates held fixed (0: full vMF,
diversity holds); negatives either a fresh uniform batch shared by all anchors (``rho = 0``, the
paper's standard runs) or per anchor with a fraction ρ from K(z) (``rho = 1``: the support-corrected
loss of eqs. 7–8); observations x = g(z) through a seeded generator; an encoder f trained with
InfoNCE through :func:`contrastlab.train.fit`; then R², MCC, APE and the orthogonality error of
h = f ∘ g on fresh test latents.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab._checks import check_choice
from contrastlab.eval.identifiability import identifiability_metrics
from contrastlab.losses import info_nce
from contrastlab.models import MLP
from contrastlab.seeds import stream_generator
from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator
from contrastlab.worlds.mixing import Mixing, make_inverse_encoder, make_mixing
from contrastlab.worlds.restricted import Concentration, sample_pairs, sample_restricted_negatives
from contrastlab.worlds.sphere import sample_uniform_sphere

__all__ = [
    "LatentRun",
    "LatentTraining",
    "aggregate",
    "fmt_mean_sd",
    "interval95",
    "recorded_run",
    "run_cached",
    "train_latent",
]

#: The per-run record that :func:`run_cached` writes next to the run's ``metrics.jsonl``.
RESULT_FILE = "result.json"
_RESULT_KEYS = ("r2", "mcc", "ape", "orthogonality_error", "final_loss", "seconds", "cpu_seconds", "sec_per_step")


@dataclass(frozen=True)
class LatentRun:
    """One training run in a latent world.

    ``rho`` is the constraint ratio (share of each anchor's ``n_negatives`` drawn uniformly from K(z));
    with ``rho = 0`` and ``shared_negatives`` one fresh uniform batch of ``n_negatives`` is shared by all
    anchors (the paper's standard runs), otherwise every anchor gets its own. ``norm_order`` places the
    MLP encoder's BatchNorm: "post_act" (Linear → ReLU → BatchNorm1d, the paper's encoder) or "pre_act"
    (Linear → BatchNorm1d → ReLU, cl-ica's order); see :class:`contrastlab.models.MLP`. ``forward_passes``
    says how anchors, positives and negatives meet BatchNorm in training: "joint" (one forward pass over
    all three, one set of batch statistics) or "separate" (three passes, each normalised by its own
    statistics, as the paper's code does).
    """

    generator: str = "identity"
    encoder: Literal["mlp", "inverse"] = "mlp"
    d: int = 3
    d_fixed: int = 1
    rho: float = 0.0
    n_negatives: int = 256
    batch_size: int = 256
    steps: int = 500
    lr: float = 1e-3
    tau: float = 0.3
    kappa: float | None = None
    concentration: Concentration = "code"
    hidden: tuple[int, ...] = (128, 256, 256, 256, 128)
    batch_norm: bool = True
    norm_order: Literal["pre_act", "post_act"] = "post_act"
    forward_passes: Literal["joint", "separate"] = "joint"
    linear_out_dim: int | None = None
    n_test: int = 2000
    shared_negatives: bool = True
    seed: int = 0


@dataclass(frozen=True)
class LatentTraining:
    """The training settings that every identifiability experiment's ``Config`` shares (a base class).

    An experiment's ``Config`` subclasses it (frozen too), adds its own sweep's fields and may give a
    field another default; :meth:`latent_run` turns one cell of its sweep into a :class:`LatentRun`.
    """

    seeds: int = 5
    """seeds per cell"""
    steps: int = 5000
    """optimiser steps per run"""
    hidden: tuple[int, ...] = (128, 256, 256, 256, 128)
    """MLP encoder widths (the paper's)"""
    norm_order: Literal["pre_act", "post_act"] = "post_act"
    """BatchNorm placement in the MLP: post_act = Linear → ReLU → BatchNorm1d (the paper's encoder),
    pre_act = Linear → BatchNorm1d → ReLU (cl-ica's order)"""
    forward_passes: Literal["joint", "separate"] = "joint"
    """how anchors, positives and negatives pass the encoder in training: joint = one pass over all three
    (BatchNorm uses one set of batch statistics), separate = three passes, each normalised by its own
    batch statistics (the paper's code)"""
    concentration: Concentration = "code"
    """law of the positive on the slice K(z): code = the paper's code (vMF(v̂, κ) on the unit sub-sphere,
    a fair coin for the sign of the free coordinate when only one is free), eq6 = vMF(v̂, κ r²) (eq. 6
    exactly), kappa = vMF(v̂, κ) on every sub-sphere, the one-coordinate case too"""
    lr: float = 1e-3
    """Adam learning rate"""
    tau: float = 0.3
    """temperature τ (κ = 1/τ)"""
    n_test: int = 2000
    """held-out test latents for the metrics"""
    seed: int = 0
    """first seed"""

    def latent_run(
        self,
        *,
        generator: str,
        d: int,
        d_fixed: int,
        n_negatives: int,
        batch_size: int,
        seed: int,
        encoder: Literal["mlp", "inverse"] = "mlp",
        rho: float = 0.0,
        shared_negatives: bool = True,
        linear_out_dim: int | None = None,
    ) -> LatentRun:
        """One cell's run: the cell's world, negatives and seed with this config's training settings."""
        return LatentRun(
            generator=generator,
            encoder=encoder,
            d=d,
            d_fixed=d_fixed,
            rho=rho,
            n_negatives=n_negatives,
            batch_size=batch_size,
            steps=self.steps,
            lr=self.lr,
            tau=self.tau,
            hidden=self.hidden,
            norm_order=self.norm_order,
            forward_passes=self.forward_passes,
            concentration=self.concentration,
            linear_out_dim=linear_out_dim,
            n_test=self.n_test,
            shared_negatives=shared_negatives,
            seed=seed,
        )


class _Encoder(nn.Module):
    """Encoder + frozen generator: raw embeddings of observations (generator applied in the batch)."""

    def __init__(self, run: LatentRun, mixing: Mixing) -> None:
        super().__init__()
        torch.manual_seed(run.seed)
        if run.encoder == "mlp":
            self.net: nn.Module = MLP(
                mixing.out_dim,
                list(run.hidden),
                run.d,
                batch_norm=run.batch_norm,
                activation="relu",
                norm_order=run.norm_order,
            )
        else:
            self.net = make_inverse_encoder(mixing, seed=run.seed)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def _per_anchor(run: LatentRun) -> bool:
    return run.rho != 0.0 or not run.shared_negatives


def _batch_source(run: LatentRun, mixing: Mixing, kappa: float) -> Any:
    def batch_at(step: int) -> dict[str, Tensor]:
        g = step_generator(run.seed, step)
        z, zp = sample_pairs(
            run.batch_size,
            run.d,
            kappa,
            run.d_fixed,
            concentration=run.concentration,
            generator=g,
            dtype=torch.float64,
        )
        if not _per_anchor(run):  # the paper's standard runs: one fresh uniform batch shared by all anchors
            neg = sample_uniform_sphere(run.n_negatives, run.d, generator=g, dtype=torch.float64)
        else:
            neg = sample_restricted_negatives(z, run.n_negatives, run.d_fixed, run.rho, generator=g)
            neg = neg.reshape(-1, run.d)
        with torch.no_grad():
            return {"x": mixing(z).float(), "x_pos": mixing(zp).float(), "x_neg": mixing(neg).float()}

    return batch_at


def train_latent(run: LatentRun, out_dir: Path | None = None) -> dict[str, float]:
    """Train one run and return its metrics.

    Args:
        run: the settings.
        out_dir: where ``fit`` writes ``metrics.jsonl`` (None: nothing written).

    Returns:
        ``{"r2", "mcc", "ape", "orthogonality_error", "final_loss", "seconds", "cpu_seconds",
        "sec_per_step"}`` (wall-clock and CPU seconds of the training; CPU time is the better measure on
        a shared machine).
    """
    check_choice("forward_passes", run.forward_passes, ("joint", "separate"))
    kappa = 1.0 / run.tau if run.kappa is None else run.kappa
    mixing = make_mixing(run.generator, run.d, seed=run.seed, out_dim=run.linear_out_dim)
    model = _Encoder(run, mixing)
    b, m = run.batch_size, run.n_negatives
    per_anchor = _per_anchor(run)

    def loss_fn(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        if run.forward_passes == "joint":  # one pass: BatchNorm normalises all three with one set of statistics
            emb = model(torch.cat([batch["x"], batch["x_pos"], batch["x_neg"]]))
            a, p, n = emb[:b], emb[b : 2 * b], emb[2 * b :]
        else:
            a, p, n = model(batch["x"]), model(batch["x_pos"]), model(batch["x_neg"])
        negs = n.reshape(b, m, -1) if per_anchor else n
        return info_nce(a, p, negs, temperature=run.tau)

    cfg = TrainConfig(
        steps=run.steps,
        seed=run.seed,
        log_every=max(1, run.steps // 10),
        progress=False,
        optim=OptimConfig(name="adam", lr=run.lr),
    )
    t0, c0 = time.perf_counter(), time.process_time()
    res = fit(model, loss_fn, _batch_source(run, mixing, kappa), cfg, out_dir=out_dir)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    g = stream_generator(run.seed, "test_latents")
    z_test = sample_uniform_sphere(run.n_test, run.d, generator=g, dtype=torch.float64)
    with torch.no_grad():
        zh = res.model(mixing(z_test).float()).double()
    out = identifiability_metrics(z_test, zh, seed=run.seed)
    out["final_loss"] = float(res.history[-1]["loss"]) if res.history else math.nan
    out["seconds"] = seconds
    out["cpu_seconds"] = cpu
    out["sec_per_step"] = seconds / max(run.steps, 1)
    return out


def run_cached(run: LatentRun, out_dir: Path) -> dict[str, float]:
    """:func:`train_latent`, recording the result in ``out_dir/result.json`` as soon as the run ends.

    If that file already records the same settings (every field of ``run``) and a complete set of
    metrics, the run is not repeated and the recorded metrics are returned. So a campaign that is
    stopped keeps every finished run, rerunning the same command trains only the missing ones, and
    runs of one campaign can be split over processes that share an output folder. A file recording
    other settings, or one whose checksum or content is bad, is replaced by a fresh run.

    Args:
        run: the settings.
        out_dir: the run's folder (``metrics.jsonl`` and ``result.json``).

    Returns:
        The metrics of :func:`train_latent` (a non-finite ``final_loss`` is recorded as null and
        returned as NaN).
    """
    return recorded_run(asdict(run), _RESULT_KEYS, Path(out_dir), lambda: train_latent(run, out_dir))


def recorded_run(
    settings: dict[str, Any], keys: Sequence[str], out_dir: Path, train: Callable[[], dict[str, float]]
) -> dict[str, float]:
    """``train()``, recording its metrics with ``settings`` in ``out_dir/result.json`` as soon as it ends.

    The record mechanism behind :func:`run_cached`, for any experiment whose runs are described by a
    dict of settings: a record with equal settings (compared after :func:`contrastlab.io.to_jsonable`)
    and a number or null for every one of ``keys`` is returned without training; a record with other
    settings, missing keys or a bad checksum is replaced by a fresh run.

    Args:
        settings: everything that determines the run (JSON-able after ``to_jsonable``).
        keys: the metrics a complete record holds (``train`` must return at least these).
        out_dir: the run's folder.
        train: trains the run and returns its metrics.

    Returns:
        The metrics (a null recorded for a non-finite value is returned as NaN).
    """
    from contrastlab.io import CorruptFileError, read_json_verified, to_jsonable, write_json_atomic

    path = Path(out_dir) / RESULT_FILE
    wanted = to_jsonable(settings)
    if path.is_file():
        try:
            stored: Any = read_json_verified(path)  # its checksum first: a damaged record is retrained
        except CorruptFileError:
            stored = None
        if isinstance(stored, dict) and stored.get("run") == wanted:
            metrics = stored.get("metrics")
            if isinstance(metrics, dict) and all(k in metrics for k in keys):
                values = {k: metrics[k] for k in keys}
                if all(v is None or isinstance(v, (int, float)) for v in values.values()):
                    return {k: math.nan if v is None else float(v) for k, v in values.items()}
    result = train()
    write_json_atomic(path, {"run": wanted, "metrics": result})
    return result


def aggregate(rows: Sequence[dict[str, float]], key: str) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for a single seed) of ``key`` over runs."""
    v = np.array([r[key] for r in rows], dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def interval95(rows: Sequence[dict[str, float]], key: str) -> tuple[float, float, float]:
    """Mean and two-sided 95% Student-t interval ``(mean, low, high)`` of ``key`` over runs.

    The half-width is t_{0.975, n−1} · sd / √n (sd with ddof = 1); a single run has no interval
    (``low = high = mean``).
    """
    from scipy.stats import t as student_t

    v = np.array([r[key] for r in rows], dtype=np.float64)
    m = float(v.mean())
    if v.size < 2:
        return m, m, m
    half = float(student_t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


def timing(runs: Mapping[Any, Sequence[dict[str, float]]], seconds: float) -> dict[str, float]:
    """A sweep's metrics ``seconds`` (its wall time) and ``cpu_seconds`` (its runs' training CPU time, summed)."""
    return {"seconds": seconds, "cpu_seconds": sum(r["cpu_seconds"] for v in runs.values() for r in v)}


def fmt_mean_sd(mean: float, sd: float) -> str:
    """``"0.63 ± 0.01"``."""
    return f"{mean:.2f} ± {sd:.2f}"


def plot_lines(
    xs: Sequence[float],
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    paper: dict[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str,
    path: Path,
) -> None:
    """R² against a swept parameter: ours (mean ± sd, solid) and the paper's points (dashed, hollow)."""
    fig, ax = figures.subplots(figsize=(4.8, 3.4))
    for i, (label, (mean, sd)) in enumerate(series.items()):
        ax.errorbar(xs, mean, yerr=sd, marker="o", color=f"C{i}", label=f"{label} (ours)", capsize=3)
        if label in paper:
            px, py = paper[label]
            ax.plot(px, py, "--", marker="o", mfc="none", color=f"C{i}", label=f"{label} (paper)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("held-out linear R²")
    ax.set_ylim(-0.02, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=110)
