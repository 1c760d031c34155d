"""The ``contrastlab train CONFIG`` job: a whole run described by one frozen, validated config.

A :class:`JobConfig` names a dataset, an encoder, a loss and an augmentation pipeline, each a key of its
registry (a plain dict), plus the negatives, the training loop (:class:`~contrastlab.train.TrainConfig`)
and the evaluation:

* ``data.name`` — :data:`~contrastlab.train.sources.DATA_BUILDERS` (the synthetic ``sphere`` and
  ``concepts`` worlds, stored feature ``pairs``, every image dataset of
  :data:`contrastlab.data.registry.DATASETS`, and ``text`` pairs);
* ``encoder.name`` — ``"mlp"`` (:class:`~contrastlab.models.MLP` on the flattened input), an image
  encoder of :data:`contrastlab.models.registry.ENCODERS`, or a text encoder of
  :data:`contrastlab.models.text.TEXT_ENCODERS` (the bundled MiniLM, a local sentence-transformers or
  Hugging Face folder);
* ``loss.name`` — the loss registry of :mod:`contrastlab.losses`, called through its signature
  (:func:`call_loss`);
* ``views.augment`` — the augmentation pipelines :data:`contrastlab.data.augment.REGIMES` (image data);
* ``matryoshka.dims`` — optional nested prefix widths: the loss is then summed over the prefixes of the
  embedding (:class:`~contrastlab.train.matryoshka.MatryoshkaConfig`).

:func:`run_job` checks the combination (:func:`check_job`, one :class:`~contrastlab.train.ConfigError`
naming the field), builds everything, trains with :func:`~contrastlab.train.fit` and writes
``config.json``, ``metrics.jsonl``, ``checkpoint.pt`` and ``results.json`` into the output folder.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from contrastlab.train.config import TrainConfig
from contrastlab.train.dataconf import ConfigError, check_fields, to_dict
from contrastlab.train.matryoshka import MatryoshkaConfig
from contrastlab.train.objective import EmbeddingObjective
from contrastlab.train.sources import DATA_BUILDERS, DataSource, build_sphere

__all__ = [
    "DataConfig",
    "ConceptsConfig",
    "TextDataConfig",
    "ViewsConfig",
    "EncoderConfig",
    "LossConfig",
    "NegativesConfig",
    "EvalConfig",
    "JobConfig",
    "DataSource",
    "DATA_BUILDERS",
    "build_sphere",
    "loss_registry",
    "embed_rows",
    "call_loss",
    "check_job",
    "build_encoder",
    "make_loss_fn",
    "make_eval_fn",
    "run_job",
]


def _known(kind: str, names: Any) -> str:
    return f"known {kind}: {', '.join(sorted(names))}"


@dataclass(frozen=True)
class ConceptsConfig:
    """The concept world (``data.name: concepts``): a tree of items with Zipfian frequencies."""

    branching: int = 3
    """children per node (>= 2)"""
    depth: int = 3
    """levels of items (>= 1); leaves are the specific concepts"""
    zipf_exponent: float = 1.0
    """s in p_i ∝ rank^{-s} (0: uniform anchor frequencies)"""
    input_dim: int = 16
    """dimension of the items' input features"""
    view_noise: float = 0.3
    """standard deviation of the Gaussian noise that makes a view"""
    seed: int = 0
    """seed of the world's structure (ranks, features)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.branching < 2 or self.depth < 1 or self.input_dim < 1:
            raise ConfigError(
                f"branching must be >= 2, depth and input_dim >= 1, got {self.branching}, {self.depth}, {self.input_dim}"
            )
        if self.zipf_exponent < 0 or self.view_noise < 0:
            raise ConfigError(f"zipf_exponent and view_noise must be >= 0, got {self.zipf_exponent}, {self.view_noise}")


@dataclass(frozen=True)
class TextDataConfig:
    """Text pairs (``data.name: text``): a pairs file, or the docstring code corpus."""

    path: str | None = None
    """a .tsv/.csv/.jsonl file of (anchor, positive[, negative…]) rows or a folder written by
    datasets' save_to_disk (None: the docstring code corpus of the installed Python)"""
    header: bool = False
    """the first line of a .tsv/.csv file names the columns"""
    split: str | None = None
    """the split of a saved DatasetDict"""
    sources: tuple[str, ...] = ("stdlib",)
    """code corpus: where its docstrings come from (stdlib, numpy, scipy, torch, sklearn)"""

    def __post_init__(self) -> None:
        check_fields(self)
        from contrastlab.data.code_corpus import CODE_SOURCES

        unknown = [s for s in self.sources if s not in CODE_SOURCES]
        if not self.sources or unknown or len(set(self.sources)) != len(self.sources):
            raise ConfigError(f"sources must be distinct names of {', '.join(CODE_SOURCES)}, got {list(self.sources)}")


@dataclass(frozen=True)
class DataConfig:
    """Where batches come from."""

    name: str = "sphere"
    """dataset, a key of contrastlab.train.sources.DATA_BUILDERS: sphere, concepts, pairs, text, digits, cifar10,
    cifar100, cifar10h, stl10, svhn, imagenet32, tiny-imagenet"""
    latent_dim: int = 10
    """sphere: dimension d of the latent space R^d (latents on S^{d-1})"""
    mixing: str = "identity"
    """sphere: generator g from contrastlab.worlds.mixing (identity, linear, spiral, patches, mlp)"""
    mixing_seed: int = 0
    """sphere: seed of the generator's random parameters"""
    batch_size: int = 256
    """anchors per step (images: images per step, each giving two views)"""
    root: str | None = None
    """image datasets: folder holding the dataset files (default $CONTRASTLAB_DATA or ./data; digits need none)"""
    image_size: int | None = None
    """image datasets: resize images to this side (None: keep the dataset's size)"""
    subset: int = 0
    """image datasets: train on the first this many training images (0: all)"""
    concepts: ConceptsConfig = field(default_factory=ConceptsConfig)
    """concepts: the concept world"""
    text: TextDataConfig = field(default_factory=TextDataConfig)
    """text: the pairs file or the code corpus"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.latent_dim < 2:
            raise ConfigError(f"latent_dim must be >= 2, got {self.latent_dim}")
        if self.batch_size < 2:
            raise ConfigError(f"batch_size must be >= 2, got {self.batch_size}")
        if self.image_size is not None and self.image_size < 1:
            raise ConfigError(f"image_size must be >= 1 or None, got {self.image_size}")
        if self.subset < 0:
            raise ConfigError(f"subset must be >= 0, got {self.subset}")


@dataclass(frozen=True)
class ViewsConfig:
    """How a positive is generated from its anchor."""

    kappa: float = 10.0
    """sphere: concentration κ of the positive's latent, z̃ ~ vMF(z, κ)"""
    augment: str = "simclr_all"
    """image datasets: the augmentation pipeline making each view, a key of contrastlab.data.augment.REGIMES
    (simclr_all, crop_only, all_without_crop)"""
    crop_scale: tuple[float, float] = (0.08, 1.0)
    """image datasets: area range of the random resized crop (digits: 0.5, 1.0)"""
    strength: float = 0.5
    """image datasets: colour-jitter strength s (SimCLR: 0.5 on CIFAR, 1.0 on ImageNet)"""
    flip: bool = True
    """image datasets: horizontal flips (false for digits, whose mirror image is another symbol)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kappa < 0:
            raise ConfigError(f"kappa must be >= 0, got {self.kappa}")
        from contrastlab.data.augment import REGIMES

        if self.augment not in REGIMES:
            raise ConfigError(f"augment {self.augment!r} is not registered; {_known('pipelines', REGIMES)}")
        if not 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1:
            raise ConfigError(f"crop_scale must satisfy 0 < min <= max <= 1, got {list(self.crop_scale)}")
        if self.strength < 0:
            raise ConfigError(f"strength must be >= 0, got {self.strength}")


@dataclass(frozen=True)
class EncoderConfig:
    """The encoder φ (and an optional projection head)."""

    name: str = "mlp"
    """mlp (an MLP on the flattened input), an image encoder of contrastlab.models.registry.ENCODERS
    (cnn, resnet18, vit), or a text encoder of contrastlab.models.text.TEXT_ENCODERS (minilm: the bundled
    all-MiniLM-L6-v2; sentence_transformers: the local model folder `path`)"""
    hidden: tuple[int, ...] = (128, 128)
    """mlp: widths of the hidden layers"""
    out_dim: int = 10
    """embedding dimension D (the representation)"""
    batch_norm: bool = False
    """mlp: BatchNorm1d after each hidden layer"""
    activation: Literal["relu", "leaky_relu", "gelu"] = "leaky_relu"
    """mlp: hidden activation"""
    width: int | None = None
    """image encoders: the architecture's width (None: contrastlab.models.registry.DEFAULT_WIDTHS)"""
    proj_dim: int = 0
    """output of a 2-layer projection head on the representation, as in SimCLR (0: no head)"""
    path: str | None = None
    """sentence_transformers: a local model folder, sentence-transformers (modules.json: its own pooling) or
    Hugging Face transformers (config.json: mean pooling); nothing is downloaded"""
    max_seq_length: int = 128
    """text encoders: tokens per text (longer texts are truncated)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.out_dim < 1 or any(h < 1 for h in self.hidden):
            raise ConfigError(f"hidden and out_dim must be positive, got hidden={self.hidden}, out_dim={self.out_dim}")
        from contrastlab.models.registry import ENCODERS
        from contrastlab.models.text import TEXT_ENCODERS

        if self.name != "mlp" and self.name not in ENCODERS and self.name not in TEXT_ENCODERS:
            raise ConfigError(
                f"name {self.name!r} is not a registered encoder; "
                f"{_known('encoders', {'mlp', *ENCODERS, *TEXT_ENCODERS})}"
            )
        if (self.path is not None) != (self.name == "sentence_transformers"):
            raise ConfigError(
                f"path must name a local model folder for name='sentence_transformers' and be unset otherwise, "
                f"got path={self.path!r} with name={self.name!r}"
            )
        if self.max_seq_length < 1:
            raise ConfigError(f"max_seq_length must be >= 1, got {self.max_seq_length}")
        if self.width is not None and (self.width < 1 or self.name == "mlp"):
            raise ConfigError(
                f"width applies to the image encoders and must be >= 1, got {self.width} with name={self.name!r} "
                "(the mlp's widths are `hidden`)"
            )
        if self.proj_dim < 0:
            raise ConfigError(f"proj_dim must be >= 0, got {self.proj_dim}")


_SET_BY_JOB = ("temperature", "symmetric", "normalize", "gather", "negatives", "labels", "reduction", "return_stats")
"""Loss arguments the job sets itself (from the config fields and the batch); never in ``loss.options``."""


def loss_registry() -> Mapping[str, Callable[..., Any]]:
    """The loss registry the job dispatches through: :data:`contrastlab.losses.LOSSES` (name → loss function).

    A loss function takes the two views ``(anchor, positive)`` (or, when it has a ``labels`` parameter,
    the stacked embeddings and their labels) and keywords; :func:`call_loss` passes those it accepts.
    """
    from contrastlab.losses import LOSSES

    return LOSSES


def _parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    return inspect.signature(fn).parameters


def _takes_labels(fn: Callable[..., Any]) -> bool:
    return "labels" in _parameters(fn)


def _needs_negatives(fn: Callable[..., Any]) -> bool:
    p = _parameters(fn).get("negatives")
    return p is not None and p.default is inspect.Parameter.empty


@dataclass(frozen=True)
class LossConfig:
    """The contrastive loss."""

    name: str = "info_nce"
    """a key of the loss registry (contrastlab.losses): info_nce, dcl (InfoNCE without the positive in the
    denominator), nt_xent (SimCLR), supcon (needs labelled data), weince (extreme-value-corrected NT-Xent), …"""
    temperature: float = 0.1
    """softmax temperature τ"""
    symmetric: bool = False
    """average the anchor→positive and positive→anchor directions (losses with a `symmetric` argument)"""
    normalize: bool = True
    """L2-normalise embeddings before the dot product (cosine similarity)"""
    options: dict[str, Any] = field(default_factory=dict)
    """further keyword arguments of the loss function, e.g. {beta_mode: global} for weince"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        registry = loss_registry()
        if self.name not in registry:
            raise ConfigError(f"name {self.name!r} is not a registered loss; {_known('losses', registry)}")
        params = _parameters(registry[self.name])
        if not isinstance(self.options, dict):
            raise ConfigError(f"options must be a table of keyword arguments, got {type(self.options).__name__}")
        positional = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n != "negatives"]
        settable = [n for n, p in params.items() if n not in _SET_BY_JOB and n not in positional]
        for key, value in self.options.items():
            if key not in settable:
                raise ConfigError(
                    f"options.{key} is not an option of loss {self.name!r}; its options: {', '.join(settable) or '(none)'}"
                )
            if not (value is None or isinstance(value, (bool, int, float, str))):
                raise ConfigError(f"options.{key} must be a number, string, bool or null, got {type(value).__name__}")
        for flag, default in (("symmetric", False), ("normalize", True)):
            if getattr(self, flag) != default and flag not in params:
                raise ConfigError(
                    f"{flag}={getattr(self, flag)} is not available: loss {self.name!r} has no {flag} argument"
                )


@dataclass(frozen=True)
class NegativesConfig:
    """Negatives beyond the batch (losses with a `negatives` argument, on data that draws them: sphere)."""

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
    """number of held-out anchor/positive pairs (images: held-out test images)"""
    seed: int = 12345
    """seed of the held-out set (independent of the training seed)"""
    probe_n: int = 5000
    """labelled data: un-augmented training images the linear probe fits on (at most all of them; 0: no probe)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.n < 2:
            raise ConfigError(f"n must be >= 2, got {self.n}")
        if self.probe_n < 0:
            raise ConfigError(f"probe_n must be >= 0, got {self.probe_n}")


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
    matryoshka: MatryoshkaConfig = field(default_factory=MatryoshkaConfig)
    """the loss on nested prefixes of the embedding (Matryoshka representation learning; empty dims: off)"""
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
        if self.data.name not in DATA_BUILDERS:
            raise ConfigError(
                f"data.name {self.data.name!r} is not a registered dataset; {_known('datasets', DATA_BUILDERS)}"
            )
        fn = loss_registry()[self.loss.name]
        if self.negatives.kind != "in_batch" and "negatives" not in _parameters(fn):
            raise ConfigError(
                f"negatives.kind={self.negatives.kind!r} needs a loss that takes negatives; {self.loss.name} does not"
            )
        if self.negatives.kind == "in_batch" and _needs_negatives(fn):
            raise ConfigError(
                f"negatives.kind must be 'shared' or 'per_anchor' for loss {self.loss.name!r} (it needs negatives)"
            )
        e = self.encoder
        self.matryoshka.check_width(e.proj_dim or e.out_dim, "encoder.proj_dim" if e.proj_dim else "encoder.out_dim")
        if self.data.name == "sphere" and self.eval.n < 2 * (self.encoder.out_dim + 2):
            raise ConfigError(
                f"eval.n must be >= {2 * (self.encoder.out_dim + 2)} on sphere: the held-out latent R² fits on half "
                f"the rows and scores the other half, each needing encoder.out_dim + 2 = {self.encoder.out_dim + 2}"
            )


def check_job(config: JobConfig, source: DataSource) -> None:
    """Check that the data, the encoder and the loss of ``config`` fit together.

    Raises:
        contrastlab.train.ConfigError: naming the field, e.g. an image encoder on vector data, a loss
            that needs labels on data without them, or fresh negatives from data that cannot draw them.
    """
    from contrastlab.models.text import TEXT_ENCODERS

    data, enc = config.data, config.encoder
    if (source.kind == "texts") != (enc.name in TEXT_ENCODERS):
        wants = "text" if enc.name in TEXT_ENCODERS else "vector or image"
        raise ConfigError(
            f"encoder.name {enc.name!r} needs {wants} data; data.name {data.name!r} gives {source.kind} "
            f"(text data takes {', '.join(sorted(TEXT_ENCODERS))})"
        )
    if source.kind == "vectors" and enc.name != "mlp":
        raise ConfigError(
            f"encoder.name {enc.name!r} needs image data; data.name {data.name!r} gives vectors (use mlp)"
        )
    if source.kind == "images" and enc.name == "mlp" and enc.width is not None:
        raise ConfigError("encoder.width does not apply to mlp; set encoder.hidden")
    if _takes_labels(loss_registry()[config.loss.name]) and not source.num_classes:
        raise ConfigError(f"loss.name {config.loss.name!r} needs labels; data.name {data.name!r} gives none")
    if config.negatives.kind != "in_batch" and not source.fresh_negatives:
        raise ConfigError(
            f"negatives.kind={config.negatives.kind!r} needs data that draws fresh negatives (sphere); "
            f"data.name {data.name!r} has in-batch negatives only"
        )


def build_encoder(config: JobConfig, source: DataSource) -> nn.Module:
    """The encoder of ``config.encoder`` for the inputs of ``source`` (plus the projection head, if any).

    ``mlp`` is :class:`~contrastlab.models.MLP` (``hidden``, ``batch_norm``, ``activation``) on the input,
    flattened when it is an image; a text encoder is ``TEXT_ENCODERS[name](path, max_seq_length)``
    (loaded from disk; ``out_dim`` must be its embedding dimension); every other name is
    ``ENCODERS[name](C, H, out_dim, width)``.

    Raises:
        contrastlab.train.ConfigError: a text model that cannot be loaded (missing folder, not a model,
            output not a 2-D embedding) or whose dimension is not ``encoder.out_dim``.
    """
    from contrastlab.models import MLP, ContrastiveModel, ProjectionHead
    from contrastlab.models.registry import build_encoder as build_image_encoder
    from contrastlab.models.text import TEXT_ENCODERS

    e = config.encoder
    model: nn.Module
    if e.name in TEXT_ENCODERS:
        try:
            text = TEXT_ENCODERS[e.name](e.path, e.max_seq_length)
        except ValueError as err:
            raise ConfigError(f"encoder.{err}") from None
        if text.embed_dim != e.out_dim:
            raise ConfigError(f"encoder.out_dim must be {text.embed_dim}, the dimension of {e.name}, got {e.out_dim}")
        model = text
    elif e.name == "mlp":
        mlp = MLP(source.in_dim, list(e.hidden), e.out_dim, batch_norm=e.batch_norm, activation=e.activation)
        model = mlp if source.kind == "vectors" else nn.Sequential(nn.Flatten(), mlp)
    else:
        channels, height, _ = source.input_shape
        model = build_image_encoder(e.name, channels, height, e.out_dim, e.width)
    return ContrastiveModel(model, ProjectionHead(e.out_dim, e.proj_dim)) if e.proj_dim else model


def call_loss(
    config: LossConfig,
    anchor: Tensor,
    positive: Tensor,
    *,
    labels: Tensor | None = None,
    negatives: Tensor | None = None,
    gather: bool = False,
    matryoshka: MatryoshkaConfig | None = None,
) -> Tensor:
    """The loss ``config.name`` of :func:`loss_registry` on one batch of embeddings.

    The loss function gets ``(anchor, positive[, negatives])`` — or ``(cat(anchor, positive),
    cat(labels, labels))`` when it takes ``labels`` — and, among ``temperature``, ``symmetric``,
    ``normalize`` and ``gather``, the keywords its signature has, plus ``config.options``. With
    ``matryoshka`` (dims given) it is the weighted sum of that loss over the nested prefixes of the
    embeddings (:func:`contrastlab.losses.matryoshka`).

    Args:
        config: the loss.
        anchor: ``(N, D)`` embeddings of the anchors.
        positive: ``(N, D)`` embeddings of their positives.
        labels: ``(N,)`` class labels (losses with a ``labels`` argument).
        negatives: ``(M, D)`` or ``(N, K, D)`` fresh negatives.
        gather: contrast with every rank's candidates under torchrun (a no-op in one process).
        matryoshka: the widths and weights of the prefixes (None or empty dims: the full embedding only).

    Returns:
        The scalar loss.
    """
    fn = loss_registry()[config.name]
    params = _parameters(fn)
    given = {"temperature": config.temperature, "symmetric": config.symmetric, "normalize": config.normalize}
    kwargs = {k: v for k, v in given.items() if k in params}
    if "gather" in params:
        kwargs["gather"] = gather
    kwargs.update(config.options)
    prefixes = matryoshka or MatryoshkaConfig()

    def loss(*args: Tensor) -> Tensor:
        return cast(Tensor, fn(*args, **kwargs))

    if "labels" in params:
        if labels is None:
            raise ValueError(f"labels must be given for loss {config.name!r}")
        return prefixes.apply(loss, torch.cat([anchor, positive]), torch.cat([labels, labels]))
    args = (anchor, positive) if negatives is None else (anchor, positive, negatives)
    return prefixes.apply(loss, *args)


def make_loss_fn(config: JobConfig) -> EmbeddingObjective:
    """The objective for :func:`~contrastlab.train.fit` from ``config.loss``/``negatives``.

    The encoder embeds anchors, positives and any fresh negatives of the batch (``(M, *in_shape)`` or
    ``(N, K, *in_shape)``) as one stack, so BatchNorm sees them all and ``train.embed_minibatch`` can
    cache it. Training gathers: under torchrun each rank contrasts its anchors with every rank's candidates.
    """

    def inputs(batch: dict[str, Tensor]) -> Tensor:
        raw = batch.get("negatives")
        extra = [] if raw is None else [raw.reshape(-1, *batch["anchor"].shape[1:])]
        return torch.cat([batch["anchor"], batch["positive"], *extra])

    def loss(emb: Tensor, batch: dict[str, Tensor]) -> Tensor:
        n, raw = batch["anchor"].shape[0], batch.get("negatives")
        negs = None if raw is None else emb[2 * n :].view(*raw.shape[: raw.ndim - batch["anchor"].ndim + 1], -1)
        return call_loss(
            config.loss,
            emb[:n],
            emb[n : 2 * n],
            labels=batch.get("labels"),
            negatives=negs,
            gather=True,
            matryoshka=config.matryoshka,
        )

    return EmbeddingObjective(inputs=inputs, loss=loss)


def embed_rows(model: nn.Module, x: Tensor, device: torch.device, rows: int) -> Tensor:
    """``model`` over ``x`` in blocks of ``rows`` rows (bounded memory), float32 on ``device``.

    ``uint8`` images are scaled to [0, 1] block by block, so a large image set is never held in float.
    """

    def block(i: int) -> Tensor:
        xb = x[i : i + rows].to(device)
        return xb.float() / 255.0 if xb.dtype == torch.uint8 else xb

    return torch.cat([model(block(i)).float() for i in range(0, x.shape[0], rows)])


def make_eval_fn(config: JobConfig, source: DataSource) -> Callable[[nn.Module, int], dict[str, float]]:
    """Held-out metrics: loss, alignment, uniformity; with latents the linear R²; with labels a linear probe.

    The loss is the mean over consecutive held-out chunks of ``data.batch_size`` pairs with in-batch
    negatives, so it is comparable with the training loss (same number of negatives).

    Alignment and uniformity follow Wang & Isola (2020, arXiv 2005.10242), eqs. 4–5 (α = 2, t = 2) on the
    loss's embeddings. ``latent_r2`` is the linear-identifiability score of Zimmermann et al. (2021,
    arXiv 2102.08850): :func:`contrastlab.eval.identifiability.linear_r2` of the true latents on the
    (normalised) representation, fitted on half the held-out rows and scored on the other half.
    ``probe_accuracy`` is a linear probe (:func:`contrastlab.eval.probe.linear_probe`) on the frozen
    representation of un-augmented images, fitted on ``eval.probe_n`` training images, scored on the held-out ones.
    """
    from contrastlab.eval.identifiability import linear_r2
    from contrastlab.eval.probe import linear_probe
    from contrastlab.losses import alignment, uniformity

    held_out = source.eval_batch
    b = min(config.data.batch_size, held_out["anchor"].shape[0])

    def eval_fn(model: nn.Module, step: int) -> dict[str, float]:
        device = next(model.parameters()).device
        represent = cast(nn.Module, getattr(model, "encoder", model))
        a = embed_rows(model, held_out["anchor"], device, b)
        p = embed_rows(model, held_out["positive"], device, b)
        labels = held_out.get("labels")
        chunk_losses = [
            float(
                call_loss(
                    config.loss,
                    a[i : i + b],
                    p[i : i + b],
                    labels=None if labels is None else labels[i : i + b].to(device),
                    matryoshka=config.matryoshka,
                )
            )
            for i in range(0, a.shape[0] - b + 1, b)
        ]
        out = {
            "loss": sum(chunk_losses) / len(chunk_losses),
            "alignment": float(alignment(a, p)),
            "uniformity": float(uniformity(a)),
        }
        if "latent" in held_out:
            rep = a if represent is model else embed_rows(represent, held_out["anchor"], device, b)
            rep = torch.nn.functional.normalize(rep, dim=1) if config.loss.normalize else rep
            out["latent_r2"] = linear_r2(held_out["latent"], rep.cpu(), seed=config.eval.seed)
        if source.probe_train is not None:
            train_x = embed_rows(represent, source.probe_train["clean"], device, b).cpu()
            test_x = embed_rows(represent, held_out["clean"], device, b).cpu()
            probe = linear_probe(
                train_x, source.probe_train["labels"], test_x, held_out["labels"], num_classes=source.num_classes
            )
            out["probe_accuracy"] = probe.accuracy
        return out

    return eval_fn


def _describe_encoder(config: JobConfig) -> str:
    e = config.encoder
    if e.name == "mlp":
        what = f"a {len(e.hidden)}-hidden-layer MLP encoder"
    elif e.name == "sentence_transformers":
        what = f"the text model {e.path}"
    else:
        what = f"a {e.name} encoder"
    head = f" with a {e.proj_dim}-d projection head" if e.proj_dim else ""
    return f"{what} ({e.out_dim}-d embeddings){head}"


def run_job(
    config: JobConfig, out_dir: str | Path, *, resume: bool = False, write_results: bool = True
) -> dict[str, Any]:
    """Train the run ``config`` describes and write its results.

    Builds the data source and checks the combination (:func:`check_job`) before anything is written,
    then writes ``config.json`` (the resolved config), ``metrics.jsonl`` and checkpoints (by
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
        contrastlab.train.ConfigError: data, encoder and loss do not fit together (the field is named).
        contrastlab.data.DatasetNotFoundError: an image dataset's files are not under ``data.root``.
    """
    import contrastlab
    from contrastlab import distributed as cd
    from contrastlab.host import host_info
    from contrastlab.io import write_json_atomic
    from contrastlab.train.trainer import fit

    source = DATA_BUILDERS[config.data.name](config)
    check_job(config, source)
    torch.manual_seed(config.train.seed)  # the encoder's initialisation
    model = build_encoder(config, source)  # before anything is written: a model that cannot load fails cleanly
    is_main = cd.rank() == 0  # under torchrun, rank 0 alone writes files
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = to_dict(config)
    if is_main:
        write_json_atomic(out / "config.json", cfg)
    eval_fn = make_eval_fn(config, source)
    result = fit(
        model, make_loss_fn(config), source.batch_at, config.train, out_dir=out, resume=resume, eval_fn=eval_fn
    )
    final = result.final_eval
    last = result.history[-1] if result.history else {}
    metrics = {"train_loss": last.get("loss"), **{f"eval_{k}": v for k, v in final.items()}}
    extras = "".join(
        f", {label} {final[key]:.4f}"
        for key, label in (("latent_r2", "linear latent R²"), ("probe_accuracy", "linear-probe accuracy"))
        if key in final
    )
    nested = f" over the prefixes {list(config.matryoshka.dims)}" if config.matryoshka.enabled else ""
    summary = (
        f"Trained {_describe_encoder(config)} with {config.loss.name} (τ = {config.loss.temperature}){nested} on "
        f"`{config.data.name}` for {result.steps} steps (batch {config.data.batch_size}, seed {config.train.seed}) "
        f"in {result.seconds:.1f} s. Held-out: loss {final.get('loss', float('nan')):.4f}, "
        f"alignment {final.get('alignment', float('nan')):.4f}, uniformity {final.get('uniformity', float('nan')):.4f}"
        f"{extras}."
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
        **({"data_provenance": source.provenance} if source.provenance is not None else {}),
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
