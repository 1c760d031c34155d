"""The configuration of a ``contrastlab train`` job: :class:`JobConfig` and its parts, frozen and validated.

A :class:`JobConfig` names a dataset, an encoder, a loss and an augmentation pipeline, each a key of its
registry (a plain dict), plus the negatives, the training loop (:class:`~contrastlab.train.TrainConfig`)
and the evaluation. Each part checks its own fields when built (one
:class:`~contrastlab.train.ConfigError` naming the field); the dataset name is checked against
:data:`~contrastlab.train.job.datasets.DATA_BUILDERS` by the runner (:mod:`contrastlab.train.job.runner`), because
the dataset builders read these configs: this module sits below them and imports none of them, so
imports run one way (configs ← builders ← runner).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from contrastlab.config import ConfigError, check_fields, from_dict
from contrastlab.train.job.lora import LoRAConfig
from contrastlab.train.job.matryoshka import MatryoshkaConfig
from contrastlab.train.job.prompts import PromptsConfig
from contrastlab.train.job.select import SelectConfig
from contrastlab.train.job.sources_config import SourcesConfig
from contrastlab.train.job.tensorboard import LogConfig
from contrastlab.train.loop.config import TrainConfig

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
    "loss_registry",
    "loss_signature",
    "takes_labels",
    "takes_teacher_scores",
    "needs_negatives",
    "known_names",
    "PER_BATCH_TENSORS",
]


def known_names(kind: str, names: Any) -> str:
    """``"known KIND: a, b, c"`` (sorted), the tail of an unknown-name error."""
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
    false_negatives: Literal["sampler", "mask", "off"] = "sampler"
    """keep duplicates out of each other's negatives — two rows sharing a text (the same token ids) or a
    row whose text is another positive of the other's anchor: sampler (the default: such rows never share
    a batch, so every anchor keeps N − 1 negatives, for every loss), mask (batches as drawn, those columns
    left out of the loss's sums through its per-candidate `weights`: info_nce, dcl), off"""
    negative_columns: Literal["own", "batch"] = "own"
    """whose negatives a row's negative columns are: own (its own anchor's alone, per-anchor negatives
    (N, K), no in-batch ones), batch (every anchor of the batch is contrasted with every row's positive and
    negative columns, N + N·K candidates, as sentence-transformers' MultipleNegativesRankingLoss does with
    hard negatives; a loss with per-candidate `weights`: info_nce, dcl)"""
    teacher_scores: str | None = None
    """a teacher's scores of each row's positive and negatives, as `contrastlab mine --teacher` writes them
    (PAIRS.teacher.jsonl), for the distillation losses margin_mse and distill_kl"""

    def __post_init__(self) -> None:
        check_fields(self)
        from contrastlab.data.text.code_corpus import CODE_SOURCES

        unknown = [s for s in self.sources if s not in CODE_SOURCES]
        if not self.sources or unknown or len(set(self.sources)) != len(self.sources):
            raise ConfigError(f"sources must be distinct names of {', '.join(CODE_SOURCES)}, got {list(self.sources)}")
        if self.teacher_scores is not None and self.path is None:
            raise ConfigError("teacher_scores needs path: the pairs file whose rows the teacher scored")


@dataclass(frozen=True)
class DataConfig:
    """Where batches come from."""

    name: str = "sphere"
    """dataset, a key of contrastlab.train.job.datasets.DATA_BUILDERS: sphere, concepts, pairs, text, sources,
    digits, cifar10, cifar100, cifar10h, stl10, svhn, imagenet32, tiny-imagenet"""
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
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    """sources: several text datasets (pairs files, BEIR tasks) and how batches are drawn from them"""

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
            raise ConfigError(f"augment {self.augment!r} is not registered; {known_names('pipelines', REGIMES)}")
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
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """text encoders: train low-rank adapters on the frozen model (r > 0; needs contrastlab[lora])"""
    gradient_checkpointing: bool = False
    """text encoders: keep only each transformer layer's input and recompute the layer in the backward pass
    (Chen et al. 2016, arXiv 1604.06174): the same loss and gradients with far less activation memory, for
    about one more forward pass per step; for long texts or large batches"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.out_dim < 1 or any(h < 1 for h in self.hidden):
            raise ConfigError(f"hidden and out_dim must be positive, got hidden={self.hidden}, out_dim={self.out_dim}")
        from contrastlab.models.registry import ENCODERS
        from contrastlab.models.text import TEXT_ENCODERS

        if self.name != "mlp" and self.name not in ENCODERS and self.name not in TEXT_ENCODERS:
            raise ConfigError(
                f"name {self.name!r} is not a registered encoder; "
                f"{known_names('encoders', {'mlp', *ENCODERS, *TEXT_ENCODERS})}"
            )
        if (self.path is not None) != (self.name == "sentence_transformers"):
            raise ConfigError(
                f"path must name a local model folder for name='sentence_transformers' and be unset otherwise, "
                f"got path={self.path!r} with name={self.name!r}"
            )
        if self.max_seq_length < 1:
            raise ConfigError(f"max_seq_length must be >= 1, got {self.max_seq_length}")
        if self.gradient_checkpointing and self.name not in TEXT_ENCODERS:
            raise ConfigError(
                f"gradient_checkpointing applies to the text encoders ({', '.join(sorted(TEXT_ENCODERS))}), "
                f"got name {self.name!r}"
            )
        if self.lora.enabled and self.name not in TEXT_ENCODERS:
            raise ConfigError(
                f"lora applies to the text encoders ({', '.join(sorted(TEXT_ENCODERS))}), got name {self.name!r}"
            )
        if self.width is not None and (self.width < 1 or self.name == "mlp"):
            raise ConfigError(
                f"width applies to the image encoders and must be >= 1, got {self.width} with name={self.name!r} "
                "(the mlp's widths are `hidden`)"
            )
        if self.proj_dim < 0:
            raise ConfigError(f"proj_dim must be >= 0, got {self.proj_dim}")


_SET_BY_JOB = (
    "temperature",
    "bias",
    "symmetric",
    "normalize",
    "gather",
    "negatives",
    "labels",
    "reduction",
    "return_stats",
)
"""Loss arguments the job sets itself (from the config fields and the batch); never in ``loss.options``."""

PER_BATCH_TENSORS = ("positive_mask", "weights", "beta_ema", "teacher_scores")
"""Loss arguments that are tensors computed per batch or carried as training state, not hyperparameters:
no config value sets them (``info_nce``'s ``positive_mask``/``weights``, ``weince``'s ``beta_ema``, the
distillation losses' ``teacher_scores``, which come with the batch)."""


def loss_registry() -> Mapping[str, Callable[..., Any]]:
    """The loss registry the job dispatches through: :data:`contrastlab.losses.LOSSES` (name → loss function).

    A loss function takes the two views ``(anchor, positive)`` (or, when it has a ``labels`` parameter,
    the stacked embeddings and their labels) and keywords; :func:`call_loss` passes those it accepts.
    """
    from contrastlab.losses import LOSSES

    return LOSSES


def loss_signature(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """The parameters of a loss function's signature, by name."""
    return inspect.signature(fn).parameters


def takes_labels(fn: Callable[..., Any]) -> bool:
    """Whether the loss takes class labels (it is then called on the stacked views and their labels)."""
    return "labels" in loss_signature(fn)


def takes_teacher_scores(fn: Callable[..., Any]) -> bool:
    """Whether the loss distils a teacher's scores (``margin_mse``, ``distill_kl``): the batch must carry them."""
    return "teacher_scores" in loss_signature(fn)


def needs_negatives(fn: Callable[..., Any]) -> bool:
    """Whether the loss requires negatives beyond the batch (a ``negatives`` argument without a default)."""
    p = loss_signature(fn).get("negatives")
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
    """further keyword arguments of the loss function, e.g. {beta_mode: global} for weince, {tau_plus: 0.1,
    beta: 1.0} for hard_negative; an argument whose default is a table (weince's global_beta) takes a table"""
    learnable_temperature: bool = False
    """learn τ with the encoder, starting from `temperature` (log-parameterised as CLIP, Radford et al. 2021,
    §2.5); it is saved in the checkpoint with the encoder"""
    max_inverse_temperature: float = 100.0
    """learnable τ: the clamp 1/τ <= this value (open_clip's 100), at least 1/temperature"""
    bias: float | None = None
    """the logit bias b of a loss with a `bias` argument (siglip); null: the loss's default (−10 for siglip,
    Zhai et al. 2023)"""
    learnable_bias: bool = False
    """learn the bias with the encoder, starting from `bias` (SigLIP trains both τ and b)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        registry = loss_registry()
        if self.name not in registry:
            raise ConfigError(f"name {self.name!r} is not a registered loss; {known_names('losses', registry)}")
        params = loss_signature(registry[self.name])
        if not isinstance(self.options, dict):
            raise ConfigError(f"options must be a table of keyword arguments, got {type(self.options).__name__}")
        positional = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n != "negatives"]
        settable = [n for n, p in params.items() if n not in (*_SET_BY_JOB, *PER_BATCH_TENSORS, *positional)]
        for key, value in self.options.items():
            if key in params and key in PER_BATCH_TENSORS:
                raise ConfigError(f"options.{key} is a tensor computed per batch, not a config value")
            if key in params and key in ("temperature", "bias", "symmetric", "normalize"):
                raise ConfigError(f"options.{key} is not an option of loss {self.name!r}: set the field {key}")
            if key not in settable:
                raise ConfigError(
                    f"options.{key} is not an option of loss {self.name!r}; its options: {', '.join(settable) or '(none)'}"
                )
            default = params[key].default
            if dataclasses.is_dataclass(default) and not isinstance(default, type):
                if not isinstance(value, dict):
                    raise ConfigError(f"options.{key} must be a table of {type(default).__name__} fields")
                from_dict(type(default), value, _prefix=f"options.{key}.")  # checks the fields, names them
            elif not (value is None or isinstance(value, (bool, int, float, str))):
                raise ConfigError(f"options.{key} must be a number, string, bool or null, got {type(value).__name__}")
        for flag, default in (("symmetric", False), ("normalize", True)):
            if getattr(self, flag) != default and flag not in params:
                raise ConfigError(
                    f"{flag}={getattr(self, flag)} is not available: loss {self.name!r} has no {flag} argument"
                )
        if self.max_inverse_temperature <= 0:
            raise ConfigError(f"max_inverse_temperature must be > 0, got {self.max_inverse_temperature}")
        if self.learnable_temperature and 1.0 / self.temperature > self.max_inverse_temperature:
            raise ConfigError(
                f"max_inverse_temperature must be >= 1/temperature = {1.0 / self.temperature:g} for a learnable "
                f"temperature, got {self.max_inverse_temperature:g}"
            )
        if (self.bias is not None or self.learnable_bias) and "bias" not in params:
            raise ConfigError(f"bias applies to losses with a logit bias (siglip); loss {self.name!r} has none")

    def bias_init(self) -> float | None:
        """The bias the loss starts from: ``bias``, else the loss's default; None for a loss without one."""
        params = loss_signature(loss_registry()[self.name])
        if "bias" not in params:
            return None
        return float(self.bias if self.bias is not None else params["bias"].default)

    def options_for_call(self) -> dict[str, Any]:
        """``options`` as keyword arguments: tables become the dataclass of the argument's default."""
        params = loss_signature(loss_registry()[self.name])
        out = {}
        for key, value in self.options.items():
            default = params[key].default
            is_table = dataclasses.is_dataclass(default) and not isinstance(default, type)
            out[key] = from_dict(type(default), value) if is_table else value
        return out


@dataclass(frozen=True)
class NegativesConfig:
    """Negatives beyond the batch: fresh samples, or a queue of past steps' embeddings.

    Fresh samples (``shared``, ``per_anchor``) need a loss with a `negatives` argument and data that
    draws them (sphere); a queue (MoCo, cross-batch memory) works on any data, with loss info_nce.
    """

    kind: Literal["in_batch", "shared", "per_anchor", "queue"] = "in_batch"
    """in_batch: the other rows' positives; shared: `num` fresh samples for every anchor; per_anchor: `num`
    each; queue: the in-batch positives plus the last `size` keys of past steps (loss info_nce; He et al.
    2020, arXiv 1911.05722; Wang et al. 2020, arXiv 1912.06798)"""
    num: int = 64
    """number of fresh negatives (shared or per anchor)"""
    size: int = 4096
    """queue: rows kept (a multiple of the number of ranks, at most the training pairs of finite data)"""
    momentum: float | None = 0.999
    """queue: m of the momentum key encoder θ_k ← m θ_k + (1 − m) θ_q, in [0, 1) (MoCo eq. 2); null: the
    trained encoder embeds the keys itself (cross-batch memory)"""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kind in ("shared", "per_anchor") and self.num < 1:
            raise ConfigError(f"num must be >= 1 for kind={self.kind!r}, got {self.num}")
        if self.kind == "queue" and self.size < 1:
            raise ConfigError(f"size must be >= 1 for kind='queue', got {self.size}")
        if self.momentum is not None and not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum must be in [0, 1) or null, got {self.momentum}")


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
    log: LogConfig = field(default_factory=LogConfig)
    """where metrics go besides metrics.jsonl (TensorBoard)"""
    out: str | None = None
    """output folder (default runs/train-YYYYmmdd-HHMMSS; --out overrides)"""
    select: SelectConfig = field(default_factory=SelectConfig)
    """the dev metric that picks the exported checkpoint, and early stopping (metric null: the last step)"""
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    """text runs: the strings put before each query and each document text"""

    def __post_init__(self) -> None:
        check_fields(self)
        fn = loss_registry()[self.loss.name]
        if self.negatives.kind == "queue":
            loss = self.loss
            if loss.name != "info_nce" or loss.symmetric or loss.options:
                raise ConfigError(
                    "negatives.kind='queue' trains InfoNCE over the batch and the queue: it needs loss.name "
                    f"info_nce with symmetric false and no options, got {loss.name!r}, symmetric={loss.symmetric}, "
                    f"options={loss.options}"
                )
        elif self.negatives.kind != "in_batch" and "negatives" not in loss_signature(fn):
            raise ConfigError(
                f"negatives.kind={self.negatives.kind!r} needs a loss that takes negatives; {self.loss.name} does not"
            )
        # a pairs file's negative columns (checked by the runner) serve a loss that needs negatives, and a
        # distillation loss takes the negatives its teacher scored from them
        text = self.data.name == "text"
        if self.negatives.kind == "in_batch" and needs_negatives(fn) and not takes_teacher_scores(fn) and not text:
            raise ConfigError(
                f"negatives.kind must be 'shared' or 'per_anchor' for loss {self.loss.name!r} (it needs negatives)"
            )
        e = self.encoder
        self.matryoshka.check_width(e.proj_dim or e.out_dim, "encoder.proj_dim" if e.proj_dim else "encoder.out_dim")
        if self.matryoshka.enabled and self.negatives.kind == "queue":
            raise ConfigError(
                "matryoshka.dims: the negative queue holds full-width keys; use matryoshka without a queue"
            )
        self._check_select_and_prompts()
        if self.data.name == "sphere" and self.eval.n < 2 * (self.encoder.out_dim + 2):
            raise ConfigError(
                f"eval.n must be >= {2 * (self.encoder.out_dim + 2)} on sphere: the held-out latent R² fits on half "
                f"the rows and scores the other half, each needing encoder.out_dim + 2 = {self.encoder.out_dim + 2}"
            )

    def _check_select_and_prompts(self) -> None:
        from contrastlab.models.text import TEXT_ENCODERS

        if self.select.patience and not self.train.eval_every:
            raise ConfigError(
                f"select.patience ({self.select.patience}) needs train.eval_every > 0: early stopping counts evaluations"
            )
        if self.prompts.enabled and self.encoder.name not in TEXT_ENCODERS:
            which = "query" if self.prompts.query else "document"
            raise ConfigError(
                f"prompts.{which}: encoder {self.encoder.name!r} has no text columns to put a prompt before "
                f"(prompts apply to the text encoders {', '.join(sorted(TEXT_ENCODERS))})"
            )
