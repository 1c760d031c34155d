"""The ``contrastlab train CONFIG`` job: a whole run described by one frozen, validated config.

A :class:`JobConfig` names the data (the synthetic sphere world of Zimmermann et al. 2021 by default:
latents z uniform on S^{d−1}, positives z̃ ~ vMF(z, κ), observations g(z) through a generator from
:mod:`contrastlab.worlds.mixing`), the encoder (an MLP), the loss and its hyperparameters, the
negatives, the training loop (:class:`~contrastlab.train.TrainConfig`) and the evaluation.
:func:`run_job` builds everything, trains with :func:`~contrastlab.train.fit` and writes
``config.json``, ``metrics.jsonl``, ``checkpoint.pt`` and ``results.json`` into the output folder.

Datasets are built through the plain dict :data:`DATA_BUILDERS` (name → builder), which other parts
extend: ``DATA_BUILDERS["cifar10"] = build_cifar10`` with ``build(config: JobConfig) -> DataSource``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab.train.config import TrainConfig
from contrastlab.train.dataconf import ConfigError, check_fields, to_dict
from contrastlab.train.objective import EmbeddingObjective
from contrastlab.train.sampler import step_generator

__all__ = [
    "DataConfig",
    "ViewsConfig",
    "EncoderConfig",
    "LossConfig",
    "NegativesConfig",
    "EvalConfig",
    "JobConfig",
    "DataSource",
    "DATA_BUILDERS",
    "build_sphere",
    "build_encoder",
    "make_loss_fn",
    "make_eval_fn",
    "run_job",
]

LOSS_NAMES = ("info_nce", "dcl", "nt_xent", "supcon", "weince")


@dataclass(frozen=True)
class DataConfig:
    """Where batches come from."""

    name: str = "sphere"
    """dataset builder, a key of contrastlab.train.job.DATA_BUILDERS ("sphere": the synthetic world)"""
    latent_dim: int = 10
    """sphere: dimension d of the latent space R^d (latents on S^{d-1})"""
    mixing: str = "identity"
    """sphere: generator g from contrastlab.worlds.mixing (identity, linear, spiral, patches, mlp)"""
    mixing_seed: int = 0
    """sphere: seed of the generator's random parameters"""
    batch_size: int = 256
    """anchors per step"""
    root: str | None = None
    """folder holding the dataset files (file-backed datasets only)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.latent_dim < 2:
            raise ConfigError(f"latent_dim must be >= 2, got {self.latent_dim}")
        if self.batch_size < 2:
            raise ConfigError(f"batch_size must be >= 2, got {self.batch_size}")


@dataclass(frozen=True)
class ViewsConfig:
    """How a positive is generated from its anchor."""

    kappa: float = 10.0
    """sphere: concentration κ of the positive's latent, z̃ ~ vMF(z, κ)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kappa < 0:
            raise ConfigError(f"kappa must be >= 0, got {self.kappa}")


@dataclass(frozen=True)
class EncoderConfig:
    """The MLP encoder φ."""

    hidden: tuple[int, ...] = (128, 128)
    """widths of the hidden layers"""
    out_dim: int = 10
    """embedding dimension D"""
    batch_norm: bool = False
    """BatchNorm1d after each hidden layer"""
    activation: Literal["relu", "leaky_relu", "gelu"] = "leaky_relu"
    """hidden activation"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.out_dim < 1 or any(h < 1 for h in self.hidden):
            raise ConfigError(f"hidden and out_dim must be positive, got hidden={self.hidden}, out_dim={self.out_dim}")


@dataclass(frozen=True)
class LossConfig:
    """The contrastive loss."""

    name: Literal["info_nce", "dcl", "nt_xent", "supcon", "weince"] = "info_nce"
    """info_nce, dcl (InfoNCE without the positive in the denominator), nt_xent (SimCLR), supcon, or weince
    (extreme-value-corrected NT-Xent, the paper's per-anchor β̂ and default statistics)"""
    temperature: float = 0.1
    """softmax temperature τ"""
    symmetric: bool = False
    """info_nce/dcl: average the anchor→positive and positive→anchor directions"""
    normalize: bool = True
    """L2-normalise embeddings before the dot product (cosine similarity)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")


@dataclass(frozen=True)
class NegativesConfig:
    """Negatives beyond the batch (info_nce and dcl only)."""

    kind: Literal["in_batch", "shared", "per_anchor"] = "in_batch"
    """in_batch: the other rows' positives; shared: `num` fresh samples for every anchor; per_anchor: `num` each"""
    num: int = 64
    """number of fresh negatives (shared or per anchor)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kind != "in_batch" and self.num < 1:
            raise ConfigError(f"num must be >= 1 for kind={self.kind!r}, got {self.num}")


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation on a held-out set drawn once from the data source."""

    n: int = 2048
    """number of held-out anchor/positive pairs"""
    seed: int = 12345
    """seed of the held-out set (independent of the training seed)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.n < 2:
            raise ConfigError(f"n must be >= 2, got {self.n}")


@dataclass(frozen=True)
class JobConfig:
    """A complete training run: data, views, encoder, loss, negatives, loop, evaluation, output."""

    data: DataConfig = field(default_factory=DataConfig)
    """data source and batch size"""
    views: ViewsConfig = field(default_factory=ViewsConfig)
    """positive-pair generation"""
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    """encoder architecture"""
    loss: LossConfig = field(default_factory=LossConfig)
    """loss and temperature"""
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    """negatives beyond the batch"""
    train: TrainConfig = field(default_factory=TrainConfig)
    """loop: steps, seed, device, precision, optimiser and schedule, logging, checkpoints"""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """held-out evaluation"""
    out: str | None = None
    """output folder (default runs/train-YYYYmmdd-HHMMSS; --out overrides)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.negatives.kind != "in_batch" and self.loss.name not in ("info_nce", "dcl"):
            raise ConfigError(f"negatives.kind={self.negatives.kind!r} needs loss.name info_nce or dcl")


@dataclass
class DataSource:
    """What a data builder returns.

    Attributes:
        in_dim: dimension of one observation (the encoder's input).
        batch_at: ``step -> batch``, a pure function of the step. A batch is a dict with
            ``"anchor"``, ``"positive"`` (``(N, in_dim)``), optional ``"latent"`` (``(N, d)``, true
            latents), ``"labels"`` (``(N,)``) and ``"negatives"`` (``(M, in_dim)`` or ``(N, K, in_dim)``).
        eval_batch: the held-out batch (same keys).
    """

    in_dim: int
    batch_at: Callable[[int], dict[str, Tensor]]
    eval_batch: dict[str, Tensor]


def build_sphere(config: JobConfig) -> DataSource:
    """The synthetic sphere world: z ~ U(S^{d−1}), z̃ ~ vMF(z, κ), observations g(z), g(z̃).

    Negatives (``negatives.kind`` shared / per_anchor) are g(z⁻) with z⁻ ~ U(S^{d−1}). Every batch is
    drawn from a generator seeded by ``(train.seed, step)``, the held-out set from ``eval.seed``.
    """
    from contrastlab.worlds.mixing import make_mixing
    from contrastlab.worlds.sphere import sample_uniform_sphere, sample_vmf

    d, n = config.data.latent_dim, config.data.batch_size
    g = make_mixing(config.data.mixing, d, seed=config.data.mixing_seed)
    kappa, neg = config.views.kappa, config.negatives

    def draw(count: int, gen: torch.Generator, with_negatives: bool) -> dict[str, Tensor]:
        z = sample_uniform_sphere(count, d, generator=gen)
        z_pos = sample_vmf(z, kappa, generator=gen)
        batch = {"anchor": g(z), "positive": g(z_pos), "latent": z}
        if with_negatives and neg.kind == "shared":
            batch["negatives"] = g(sample_uniform_sphere(neg.num, d, generator=gen))
        elif with_negatives and neg.kind == "per_anchor":
            batch["negatives"] = g(sample_uniform_sphere(count * neg.num, d, generator=gen)).view(count, neg.num, -1)
        return batch

    def batch_at(step: int) -> dict[str, Tensor]:
        return draw(n, step_generator(config.train.seed, step), True)

    eval_batch = draw(config.eval.n, torch.Generator().manual_seed(config.eval.seed), False)
    return DataSource(in_dim=g.out_dim, batch_at=batch_at, eval_batch=eval_batch)


DATA_BUILDERS: dict[str, Callable[[JobConfig], DataSource]] = {"sphere": build_sphere}
"""Dataset name → ``build(config) -> DataSource``. Extend it to train on other data."""


def build_encoder(config: JobConfig, in_dim: int) -> nn.Module:
    """The MLP encoder of ``config.encoder`` for inputs of dimension ``in_dim``."""
    from contrastlab.models import MLP

    e = config.encoder
    return MLP(in_dim, list(e.hidden), e.out_dim, batch_norm=e.batch_norm, activation=e.activation)


def _loss_value(
    config: LossConfig, a: Tensor, p: Tensor, batch: dict[str, Tensor], negatives: Tensor | None, *, gather: bool
) -> Tensor:
    # gather=True in training: under torchrun each rank contrasts its anchors with every rank's
    # candidates (a no-op in one process); evaluation runs on rank 0 alone and never gathers.
    from contrastlab import losses

    if config.name in ("info_nce", "dcl"):
        return losses.info_nce(
            a,
            p,
            negatives,
            temperature=config.temperature,
            variant="dcl" if config.name == "dcl" else "infonce",
            symmetric=config.symmetric,
            normalize=config.normalize,
            gather=gather,
        )
    if config.name == "nt_xent":
        return losses.nt_xent(a, p, temperature=config.temperature, gather=gather)
    if config.name == "weince":
        # return_stats=False (the default) returns the loss alone
        return cast(Tensor, losses.weince(a, p, temperature=config.temperature, gather=gather))
    if "labels" not in batch:
        raise ValueError("loss.name is 'supcon' but the dataset gives no labels")
    labels = batch["labels"]
    return losses.supcon(torch.cat([a, p]), torch.cat([labels, labels]), temperature=config.temperature, gather=gather)


def make_loss_fn(config: JobConfig) -> EmbeddingObjective:
    """The objective for :func:`~contrastlab.train.fit` from ``config.loss``/``negatives``.

    The encoder embeds anchors, positives and any negatives of the batch (``(M, in_dim)`` or
    ``(N, K, in_dim)``) as one ``(R, in_dim)`` stack, so ``train.embed_minibatch`` can cache it.
    """

    def inputs(batch: dict[str, Tensor]) -> Tensor:
        raw = batch.get("negatives")
        extra = [] if raw is None else [raw.reshape(-1, raw.shape[-1])]
        return torch.cat([batch["anchor"], batch["positive"], *extra])

    def loss(emb: Tensor, batch: dict[str, Tensor]) -> Tensor:
        n, raw = batch["anchor"].shape[0], batch.get("negatives")
        negs = None if raw is None else emb[2 * n :].view(*raw.shape[:-1], -1)
        return _loss_value(config.loss, emb[:n], emb[n : 2 * n], batch, negs, gather=True)

    return EmbeddingObjective(inputs=inputs, loss=loss)


def _linear_r2(emb: Tensor, latent: Tensor) -> float:
    """R² of the least-squares affine map from embeddings to true latents (float64), averaged over dims.

    Solved with numpy (LAPACK through OpenBLAS): MKL's ``torch.linalg.lstsq`` gave last-bit differences
    for the same inputs at different memory addresses, which broke bit-identical reruns.
    """
    e = emb.detach().double().cpu().numpy()
    x = np.concatenate([e, np.ones((e.shape[0], 1))], axis=1)
    y = latent.detach().double().cpu().numpy()
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    ss_res = ((y - x @ coef) ** 2).sum(axis=0)
    ss_tot = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
    return float((1.0 - ss_res / ss_tot).mean())


def make_eval_fn(config: JobConfig, source: DataSource) -> Callable[[nn.Module, int], dict[str, float]]:
    """Held-out metrics: loss, alignment, uniformity and, with latents, linear R².

    The loss is the mean over consecutive held-out chunks of ``data.batch_size`` pairs with in-batch
    negatives, so it is comparable with the training loss (same number of negatives).

    Alignment and uniformity follow Wang & Isola (2020), eqs. 4–5 (α = 2, t = 2); the R² is the
    linear-identifiability score of Zimmermann et al. (2021) (affine least squares, mean over dims).
    """
    from contrastlab.losses import alignment, uniformity

    held_out = source.eval_batch

    def eval_fn(model: nn.Module, step: int) -> dict[str, float]:
        device = next(model.parameters()).device
        a = model(held_out["anchor"].to(device)).float()
        p = model(held_out["positive"].to(device)).float()
        # the loss over held-out chunks of the training batch size (the same number of negatives)
        b = min(config.data.batch_size, a.shape[0])
        chunks = [(i, i + b) for i in range(0, a.shape[0] - b + 1, b)]
        chunk_losses = [
            float(
                _loss_value(config.loss, a[i:j], p[i:j], {k: v[i:j] for k, v in held_out.items()}, None, gather=False)
            )
            for i, j in chunks
        ]
        out = {
            "loss": sum(chunk_losses) / len(chunk_losses),
            "alignment": float(alignment(a, p)),
            "uniformity": float(uniformity(a)),
        }
        if "latent" in held_out:
            emb = torch.nn.functional.normalize(a, dim=1) if config.loss.normalize else a
            out["latent_r2"] = _linear_r2(emb, held_out["latent"].to(device))
        return out

    return eval_fn


def run_job(
    config: JobConfig, out_dir: str | Path, *, resume: bool = False, write_results: bool = True
) -> dict[str, Any]:
    """Train the run ``config`` describes and write its results.

    Writes ``config.json`` (the resolved config), ``metrics.jsonl`` and checkpoints (by
    :func:`~contrastlab.train.fit`) and ``results.json`` (summary, metrics, a final-evaluation table;
    the layout of ``docs/contracts.md``) into ``out_dir``.

    Args:
        config: the job.
        out_dir: the output folder.
        resume: continue from the checkpoint in ``out_dir``.
        write_results: write ``results.json`` (the ``eval`` command re-evaluates without it).

    Returns:
        The results dict.

    Raises:
        contrastlab.train.ConfigError: ``data.name`` is not in :data:`DATA_BUILDERS`.
    """
    import contrastlab
    from contrastlab.experiments import host_info
    from contrastlab.io import write_json_atomic
    from contrastlab.train.trainer import fit

    if config.data.name not in DATA_BUILDERS:
        raise ConfigError(f"data.name must be one of {tuple(DATA_BUILDERS)}, got {config.data.name!r}")
    from contrastlab import distributed as cd

    is_main = cd.rank() == 0  # under torchrun, rank 0 alone writes files
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = to_dict(config)
    if is_main:
        write_json_atomic(out / "config.json", cfg)
    source = DATA_BUILDERS[config.data.name](config)
    torch.manual_seed(config.train.seed)  # the encoder's initialisation
    model = build_encoder(config, source.in_dim)
    eval_fn = make_eval_fn(config, source)
    result = fit(
        model, make_loss_fn(config), source.batch_at, config.train, out_dir=out, resume=resume, eval_fn=eval_fn
    )
    final = result.final_eval
    last = result.history[-1] if result.history else {}
    metrics = {"train_loss": last.get("loss"), **{f"eval_{k}": v for k, v in final.items()}}
    summary = (
        f"Trained a {len(config.encoder.hidden)}-hidden-layer MLP encoder ({config.encoder.out_dim}-d embeddings) with "
        f"{config.loss.name} (τ = {config.loss.temperature}) on `{config.data.name}` for {result.steps} steps "
        f"(batch {config.data.batch_size}, seed {config.train.seed}) in {result.seconds:.1f} s. "
        f"Held-out: loss {final.get('loss', float('nan')):.4f}, alignment {final.get('alignment', float('nan')):.4f}, "
        f"uniformity {final.get('uniformity', float('nan')):.4f}"
        + (f", linear latent R² {final['latent_r2']:.4f}." if "latent_r2" in final else ".")
    )
    results: dict[str, Any] = {
        "name": "train",
        "summary": summary,
        "metrics": metrics,
        "tables": [
            {
                "title": "Held-out evaluation by step",
                "columns": ["step", *sorted({k for r in result.history for k in r if k.startswith("eval/")})],
                "rows": [],
            }
        ],
        "figures": [],
        "config": cfg,
        "version": contrastlab.__version__,
        "runtime_s": result.seconds,
        "resumed_from": result.resumed_from,
        "host": host_info(),
    }
    cols = results["tables"][0]["columns"]
    results["tables"][0]["rows"] = [[r.get(c) for c in cols] for r in result.history if any(k in r for k in cols[1:])]
    if write_results and is_main:
        import datetime as _dt

        results["timestamp"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        write_json_atomic(out / "results.json", results)
    return results
