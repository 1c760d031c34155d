"""The ``contrastlab train CONFIG`` runner: build what a :class:`~contrastlab.train.JobConfig` names, train, write.

The config (:mod:`contrastlab.train.job.config`) names a dataset, an encoder, a loss and an augmentation
pipeline, each a key of its registry (a plain dict):

* ``data.name`` — :data:`~contrastlab.train.job.datasets.DATA_BUILDERS` (the synthetic ``sphere`` and
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
  embedding (:class:`~contrastlab.train.job.matryoshka.MatryoshkaConfig`).

:func:`run_job` checks the combination (:func:`build_source` and :func:`check_job`, one
:class:`~contrastlab.train.ConfigError` naming the field), builds everything, trains with
:func:`~contrastlab.train.fit` and writes ``config.json``, ``metrics.jsonl``, ``checkpoint.pt`` and
``results.json`` into the output folder, and for a text encoder ``model/``, a sentence-transformers folder
of the fine-tuned model (:mod:`contrastlab.train.job.export`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from contrastlab.config import ConfigError, to_dict
from contrastlab.train.job.config import (
    JobConfig,
    LossConfig,
    known_names,
    loss_registry,
    loss_signature,
    needs_negatives,
    takes_labels,
    takes_teacher_scores,
)
from contrastlab.train.job.data_source import DataSource
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.loss_parameters import LossParameters, attached_loss_parameters
from contrastlab.train.job.matryoshka import MatryoshkaConfig
from contrastlab.train.loop.objective import EmbeddingObjective

__all__ = [
    "build_source",
    "embed_rows",
    "call_loss",
    "check_job",
    "build_encoder",
    "make_loss_fn",
    "make_objective",
    "make_eval_fn",
    "run_job",
]


def build_source(config: JobConfig) -> DataSource:
    """The data source of ``config.data`` from :data:`~contrastlab.train.job.datasets.DATA_BUILDERS`.

    Raises:
        contrastlab.train.ConfigError: ``data.name`` is not a registered dataset (or the builder's own
            error, naming the field).
    """
    if config.data.name not in DATA_BUILDERS:
        raise ConfigError(
            f"data.name {config.data.name!r} is not a registered dataset; {known_names('datasets', DATA_BUILDERS)}"
        )
    return DATA_BUILDERS[config.data.name](config)


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
    if takes_labels(loss_registry()[config.loss.name]) and not source.num_classes:
        raise ConfigError(f"loss.name {config.loss.name!r} needs labels; data.name {data.name!r} gives none")
    distils = takes_teacher_scores(loss_registry()[config.loss.name])
    if distils and not source.teacher_scores:
        raise ConfigError(
            f"loss.name {config.loss.name!r} distils a teacher's scores; data.name {data.name!r} gives none "
            "(data.text.teacher_scores: the file contrastlab mine --teacher writes)"
        )
    if source.teacher_scores and not distils:
        raise ConfigError(
            f"data.text.teacher_scores is set, but loss.name {config.loss.name!r} does not distil a teacher's "
            "scores (margin_mse, distill_kl)"
        )
    neg = config.negatives
    if neg.kind == "queue":
        from contrastlab import distributed as cd

        if source.train_size is not None and neg.size > source.train_size:
            raise ConfigError(
                f"negatives.size ({neg.size}) is larger than the data: data.name {data.name!r} has "
                f"{source.train_size} training pairs, so the queue would hold copies of the same pairs"
            )
        if neg.size % cd.world_size():
            raise ConfigError(
                f"negatives.size must be a multiple of the number of ranks {cd.world_size()}, got {neg.size}"
            )
    elif config.negatives.kind != "in_batch" and not source.fresh_negatives:
        raise ConfigError(
            f"negatives.kind={config.negatives.kind!r} needs data that draws fresh negatives (sphere); "
            f"data.name {data.name!r} has in-batch negatives only"
        )


def build_encoder(config: JobConfig, source: DataSource) -> nn.Module:
    """The encoder of ``config.encoder`` for the inputs of ``source`` (plus the projection head, if any).

    ``mlp`` is :class:`~contrastlab.models.MLP` (``hidden``, ``batch_norm``, ``activation``) on the input,
    flattened when it is an image; a text encoder is ``TEXT_ENCODERS[name](path, max_seq_length)``
    (loaded from disk; ``out_dim`` must be its embedding dimension); every other name is
    ``ENCODERS[name](C, H, out_dim, width)``. ``encoder.gradient_checkpointing`` switches on the text
    model's activation checkpointing. With ``encoder.lora.r > 0`` the text model is frozen and LoRA
    adapters on ``encoder.lora.targets`` train (:mod:`contrastlab.train.job.lora`). A loss with learnable
    parameters (``loss.learnable_temperature``, ``loss.learnable_bias``) adds them as the submodule ``loss_parameters``
    (:class:`~contrastlab.train.job.loss_parameters.LossParameters`), which ``forward`` does not read.

    Raises:
        contrastlab.train.ConfigError: a text model that cannot be loaded (missing folder, not a model,
            output not a 2-D embedding) or whose dimension is not ``encoder.out_dim``; LoRA targets that
            name no linear layer of it.
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
        if e.gradient_checkpointing:
            try:
                text.enable_gradient_checkpointing()
            except ValueError as err:
                raise ConfigError(f"encoder.{err}") from None
        try:
            model = e.lora.apply(text)  # adapters on the frozen model (r > 0), seeded by train.seed
        except ConfigError as err:
            raise ConfigError(f"encoder.lora.{err}") from None
    elif e.name == "mlp":
        mlp = MLP(source.in_dim, list(e.hidden), e.out_dim, batch_norm=e.batch_norm, activation=e.activation)
        model = mlp if source.kind == "vectors" else nn.Sequential(nn.Flatten(), mlp)
    else:
        channels, height, _ = source.input_shape
        model = build_image_encoder(e.name, channels, height, e.out_dim, e.width)
    model = ContrastiveModel(model, ProjectionHead(e.out_dim, e.proj_dim)) if e.proj_dim else model
    if config.loss.learnable_temperature or config.loss.learnable_bias:
        model.loss_parameters = LossParameters(config.loss)  # trained and checkpointed with the encoder
    return model


def call_loss(
    config: LossConfig,
    anchor: Tensor,
    positive: Tensor,
    *,
    labels: Tensor | None = None,
    negatives: Tensor | None = None,
    gather: bool = False,
    parameters: LossParameters | None = None,
    matryoshka: MatryoshkaConfig | None = None,
    weights: Tensor | None = None,
    teacher_scores: Tensor | None = None,
) -> Tensor:
    """The loss ``config.name`` of :func:`loss_registry` on one batch of embeddings.

    The loss function gets ``(anchor, positive[, negatives])`` — or ``(cat(anchor, positive),
    cat(labels, labels))`` when it takes ``labels`` — and, among ``temperature``, ``bias``,
    ``symmetric``, ``normalize`` and ``gather``, the keywords its signature has, plus ``config.options``
    (tables converted to the argument's dataclass). A learnable τ or bias comes from ``parameters``. With
    ``matryoshka`` (dims given) it is the weighted sum of that loss over the nested prefixes of the
    embeddings (:func:`contrastlab.losses.matryoshka`).

    Args:
        config: the loss.
        anchor: ``(N, D)`` embeddings of the anchors.
        positive: ``(N, D)`` embeddings of their positives.
        labels: ``(N,)`` class labels (losses with a ``labels`` argument).
        negatives: ``(M, D)`` or ``(N, K, D)`` fresh negatives.
        gather: contrast with every rank's candidates under torchrun (a no-op in one process).
        parameters: the learnable loss parameters attached to the encoder (:func:`build_encoder`).
        matryoshka: the widths and weights of the prefixes (None or empty dims: the full embedding only).
        weights: ``(N, M)`` per-candidate weights of a loss that takes them (0 leaves a false negative out).
        teacher_scores: ``(N, 1 + K)`` a teacher's scores of each anchor's positive and negatives (the
            distillation losses; passed by keyword, so matryoshka prefixes never truncate them).

    Returns:
        The scalar loss.
    """
    fn = loss_registry()[config.name]
    params = loss_signature(fn)
    temperature: Any = config.temperature if parameters is None else parameters.temperature(config.temperature)
    bias: Any = config.bias if parameters is None else parameters.bias(config.bias)
    given = {"temperature": temperature, "symmetric": config.symmetric, "normalize": config.normalize}
    if bias is not None:
        given["bias"] = bias
    kwargs = {k: v for k, v in given.items() if k in params}
    if "gather" in params:
        kwargs["gather"] = gather
    kwargs.update(config.options_for_call())
    if weights is not None:
        kwargs["weights"] = weights
    if "teacher_scores" in params:
        if teacher_scores is None:
            raise ValueError(f"teacher_scores must be given for loss {config.name!r}")
        kwargs["teacher_scores"] = teacher_scores
    prefixes = matryoshka or MatryoshkaConfig()

    def loss(*args: Tensor) -> Tensor:
        return cast(Tensor, fn(*args, **kwargs))

    if "labels" in params:
        if labels is None:
            raise ValueError(f"labels must be given for loss {config.name!r}")
        return prefixes.apply(loss, torch.cat([anchor, positive]), torch.cat([labels, labels]))
    args = (anchor, positive) if negatives is None else (anchor, positive, negatives)
    return prefixes.apply(loss, *args)


def batch_candidates(positive: Tensor, negatives: Tensor) -> tuple[Tensor, Tensor]:
    """Every row's positive and negatives as one set of candidates for every anchor (``negative_columns: batch``).

    Args:
        positive: this rank's positives. Shape ``(n, D)``.
        negatives: this rank's per-anchor negatives. Shape ``(n, K, D)``.

    Returns:
        ``(candidates, weights)``: ``candidates`` of shape ``(n + n·K, D)``, this rank's positives then its
        negatives row by row; ``weights`` of shape ``(n, M)`` over every rank's candidates (the loss gathers
        them in rank order, M their total), 1 but 0 for the copy of anchor i's own positive among them, which
        the loss already holds as its positive. The loss of anchor i is then −log of its positive's share among
        every positive and negative of the batch: sentence-transformers' MultipleNegativesRankingLoss with
        hard negatives.
    """
    from contrastlab import distributed as cd

    n = positive.shape[0]
    candidates = torch.cat([positive, negatives.reshape(-1, positive.shape[-1])])
    sizes = cd.all_sizes(candidates.shape[0], candidates.device)
    offset = sum(sizes[: cd.rank()])
    weights = torch.ones(n, sum(sizes), dtype=positive.dtype, device=positive.device)
    rows = torch.arange(n, device=positive.device)
    weights[rows, offset + rows] = 0.0
    return candidates, weights


def make_loss_fn(config: JobConfig, parameters: LossParameters | None = None) -> EmbeddingObjective:
    """The objective for :func:`~contrastlab.train.fit` from ``config.loss``/``negatives`` (batch negatives).

    The encoder embeds anchors, positives and any fresh negatives of the batch (``(M, *in_shape)`` or
    ``(N, K, *in_shape)``) as one stack, so BatchNorm sees them all and ``train.embed_minibatch`` can
    cache it. A text encoder embeds the stack's rows in groups of similar token length, each padded to
    its own longest row (:class:`~contrastlab.models.text.TransformerTextEncoder`): short queries are not
    padded to the longest passage, and the embeddings are those of the stack padded as one batch. Training gathers: under torchrun each rank contrasts its anchors with every rank's candidates.
    ``parameters`` are the learnable loss parameters attached to the encoder (:func:`build_encoder`).
    """

    def inputs(batch: dict[str, Tensor]) -> Tensor:
        raw = batch.get("negatives")
        extra = [] if raw is None else [raw.reshape(-1, *batch["anchor"].shape[1:])]
        return torch.cat([batch["anchor"], batch["positive"], *extra])

    def loss(emb: Tensor, batch: dict[str, Tensor]) -> Tensor:
        n, raw = batch["anchor"].shape[0], batch.get("negatives")
        negs = None if raw is None else emb[2 * n :].view(*raw.shape[: raw.ndim - batch["anchor"].ndim + 1], -1)
        false_negative = batch.get("false_negative")  # (n, N) of data.text.false_negatives: mask
        weights = None if false_negative is None else (~false_negative).to(emb.dtype)
        if negs is not None and negs.ndim == 3 and config.data.text.negative_columns == "batch":
            negs, weights = batch_candidates(emb[n : 2 * n], negs)
        return call_loss(
            config.loss, emb[:n], emb[n : 2 * n], labels=batch.get("labels"), negatives=negs, gather=True,
            parameters=parameters, matryoshka=config.matryoshka, weights=weights,
            teacher_scores=batch.get("teacher_scores"),
        )  # fmt: skip

    return EmbeddingObjective(inputs=inputs, loss=loss)


def make_objective(config: JobConfig, model: nn.Module) -> tuple[EmbeddingObjective, dict[str, Any]]:
    """The training objective of ``config`` for ``model``, and the state :func:`~contrastlab.train.fit` must checkpoint.

    With ``negatives.kind: queue`` it is :func:`~contrastlab.train.loop.queue.queue_objective` over a
    :class:`~contrastlab.train.loop.queue.NegativeQueue` of ``negatives.size`` rows of the loss's embedding
    dimension, with a :class:`~contrastlab.train.loop.queue.MomentumEncoder` of momentum ``negatives.momentum``
    (MoCo) or, for ``momentum: null``, the trained encoder's own embeddings (cross-batch memory); both are
    returned as extra state (``{"queue": ..., "key_encoder": ...}``), so a resumed run continues
    bit-identically. Otherwise it is :func:`make_loss_fn` and no extra state.
    """
    from contrastlab.train.loop.queue import MomentumEncoder, NegativeQueue, queue_objective

    parameters = attached_loss_parameters(model)
    neg = config.negatives
    if neg.kind != "queue":
        return make_loss_fn(config, parameters), {}
    dim = config.encoder.proj_dim or config.encoder.out_dim
    queue = NegativeQueue(neg.size, dim)
    extra: dict[str, Any] = {"queue": queue}
    key_encoder = None
    if neg.momentum is not None:
        key_encoder = MomentumEncoder(model, momentum=neg.momentum)
        extra["key_encoder"] = key_encoder
    temperature = config.loss.temperature if parameters is None else parameters.temperature(config.loss.temperature)
    objective = queue_objective(
        queue, temperature=temperature, key_encoder=key_encoder, normalize=config.loss.normalize
    )
    return objective, extra


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
    negatives, so it is comparable with the training loss (same number of negatives); a loss that needs
    negatives beyond the batch (support-corrected InfoNCE, the distillation losses) has no held-out value:
    the held-out pairs carry no negatives and no teacher scores.

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
    fn = loss_registry()[config.loss.name]
    no_loss = takes_teacher_scores(fn) or needs_negatives(fn)  # held-out pairs carry no negatives nor scores

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
                    parameters=attached_loss_parameters(model),
                    matryoshka=config.matryoshka,
                )
            )
            for i in range(0, a.shape[0] - b + 1, b)
            if not no_loss
        ]
        out = {"loss": sum(chunk_losses) / len(chunk_losses)} if chunk_losses else {}
        out.update({"alignment": float(alignment(a, p)), "uniformity": float(uniformity(a))})
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


def _uninformative_held_out(anchors: Tensor) -> dict[str, str]:
    """``metric -> why`` for the held-out metrics that say nothing about these ``(N, ...)`` held-out anchors.

    Uniformity (Wang & Isola 2020, arXiv 2005.10242) is the log mean Gaussian potential over pairs of anchors: with
    fewer than two distinct anchors every pair is a row and a copy of itself, and the value is 0 (up to rounding) whatever the model.
    """
    n, distinct = int(anchors.shape[0]), int(torch.unique(anchors.reshape(anchors.shape[0], -1), dim=0).shape[0])
    if distinct >= 2:
        return {}
    return {"uniformity": f"fewer than two distinct held-out anchors: {n} rows, {distinct} distinct"}


def _held_out_metric(name: str, final: dict[str, float], uninformative: dict[str, str]) -> str:
    """``"name 0.1234"`` for the summary, or why the value is not given (not computed, or not informative)."""
    if name not in final:
        return f"{name} not computed"
    if name in uninformative:
        return f"{name} not informative ({uninformative[name]})"
    return f"{name} {final[name]:.4f}"


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


def _tensorboard_log(config: JobConfig, model: nn.Module, out: Path) -> Any:
    """A :class:`~contrastlab.train.job.tensorboard.TensorBoardLog` with the run's τ into ``out``, if asked."""
    if not config.log.tensorboard:
        return None
    from contrastlab.train.job.tensorboard import TensorBoardLog

    def temperature() -> float:
        learned = attached_loss_parameters(model)
        return (learned.values() if learned is not None else {}).get("temperature", config.loss.temperature)

    return TensorBoardLog(out, temperature)


def peak_memory(device: torch.device) -> dict[str, Any]:
    """The run's peak memory: CUDA's peak allocated bytes on a GPU, else the process's peak resident set size.

    Returns:
        ``{"bytes": int, "what": str}`` (``what`` says which measure it is; the RSS includes everything the
        process holds, data and libraries too).
    """
    if device.type == "cuda":
        return {"bytes": int(torch.cuda.max_memory_allocated(device)), "what": "torch.cuda.max_memory_allocated"}
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"bytes": int(rss if sys.platform == "darwin" else rss * 1024), "what": "process peak RSS (ru_maxrss)"}


def _select_best(config: JobConfig, selector: Any, steps: int) -> dict[str, Any] | None:
    """Load the selected weights into the model (``select.metric``); the record of what was selected."""
    if selector is None:
        return None
    step = selector.load_best()
    return {
        "metric": config.select.metric,
        "mode": config.select.mode,
        "step": step,
        "value": selector.best_value,
        "last_step": steps,
        "stopped_early": steps < config.train.steps,
    }


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
    from contrastlab.train.job.dev_metrics import build_dev, with_dev_metrics
    from contrastlab.train.job.select import Selector
    from contrastlab.train.loop.trainer import fit

    source = build_source(config)
    check_job(config, source)
    dev = build_dev(config, source)  # a dev set that does not read fails before anything is written
    torch.manual_seed(config.train.seed)  # the encoder's initialisation
    model = build_encoder(config, source)  # before anything is written: a model that cannot load fails cleanly
    selector = Selector(config.select, model) if config.select.enabled else None
    is_main = cd.rank() == 0  # under torchrun, rank 0 alone writes files
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = to_dict(config)
    if is_main:
        write_json_atomic(out / "config.json", cfg)
    eval_fn = with_dev_metrics(config, dev, make_eval_fn(config, source), selector)
    objective, extra_state = make_objective(config, model)
    if selector is not None:  # the best-so-far state travels in every checkpoint
        extra_state = {**extra_state, "select": selector}
    board = _tensorboard_log(config, model, out) if is_main else None
    try:
        result = fit(
            model, objective, source.batch_at, config.train, out_dir=out, resume=resume, eval_fn=eval_fn,
            extra_state=extra_state, should_stop=None if selector is None else selector.should_stop, on_row=board,
        )  # fmt: skip
    finally:
        if board is not None:
            board.close()
    selected = _select_best(config, selector, result.steps)
    final = result.final_eval
    last = result.history[-1] if result.history else {}
    metrics = {"train_loss": last.get("loss"), **{f"eval_{k}": v for k, v in final.items()}}
    learned = attached_loss_parameters(result.model)
    if learned is not None:
        metrics.update({f"learned_{k}": v for k, v in learned.values().items()})
    extras = "".join(
        f", {label} {final[key]:.4f}"
        for key, label in (("latent_r2", "linear latent R²"), ("probe_accuracy", "linear-probe accuracy"))
        if key in final
    )
    from contrastlab.models.lora import count_parameters

    counts = count_parameters(result.model)
    lora = config.encoder.lora
    if lora.enabled:
        nested_lora = f" through LoRA (r = {lora.r} on {', '.join(lora.targets)}: {counts['trainable']:,} of {counts['total']:,} parameters trained)"
    else:
        nested_lora = ""
    nested = f" over the prefixes {list(config.matryoshka.dims)}" if config.matryoshka.enabled else ""
    uninformative = _uninformative_held_out(source.eval_batch["anchor"])
    summary = (
        f"Trained {_describe_encoder(config)}{nested_lora} with {config.loss.name} (τ = {config.loss.temperature}){nested} on "
        f"`{config.data.name}` for {result.steps} steps (batch {config.data.batch_size}, seed {config.train.seed}) "
        f"in {result.seconds:.1f} s. Held-out: "
        + ", ".join(_held_out_metric(name, final, uninformative) for name in ("loss", "alignment", "uniformity"))
        + f"{extras}."
    )
    if selected is not None:
        summary += (
            f" Selected step {selected['step']} by {selected['metric']} = {selected['value']:.4f}"
            f"{' (stopped early)' if selected['stopped_early'] else ''}."
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
        "parameters": counts,
        "device": str(next(result.model.parameters()).device),  # train.device resolved (auto: cuda or cpu)
        "peak_memory": peak_memory(next(result.model.parameters()).device),
        "resumed_from": result.resumed_from,
        "host": host_info(),
        **({"selected": selected} if selected is not None else {}),
    }
    cols = results["tables"][0]["columns"]
    results["tables"][0]["rows"] = [[r.get(c) for c in cols] for r in result.history if any(k in r for k in cols[1:])]
    from contrastlab.models.text import TEXT_ENCODERS

    if write_results and is_main and config.encoder.name in TEXT_ENCODERS:  # the fine-tuned model leaves the run
        from contrastlab.train.job.export import MODEL_FOLDER, save_sentence_transformers
        from contrastlab.train.job.model_card import run_card_from_results

        model_step = int(result.steps if selected is None else selected["step"])
        about = {
            "run": str(out.resolve()),
            "step": model_step,
            "encoder": config.encoder.name,
            "loss": config.loss.name,
        }
        results["model_step"] = model_step
        results["learned"] = learned.values() if learned is not None else {}
        card = run_card_from_results(cfg, results, model_step)
        save_sentence_transformers(
            model, out / MODEL_FOLDER, normalize=config.loss.normalize, about=about,
            prompts=config.prompts.as_st_prompts(), card=card,
        )  # fmt: skip
        results["model_folder"] = MODEL_FOLDER
    if write_results and is_main:
        import datetime as _dt

        results["timestamp"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        write_json_atomic(out / "results.json", results)
    return results
