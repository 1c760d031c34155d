"""A text model named as ``contrastlab audit`` names it, loadable wherever it runs, with its identity.

:class:`TextModelSource` is a small picklable value (a name, a sequence length, a device, a prompt): ``contrastlab
encode`` loads it once in its own process, and each Ray actor loads its own copy from the same name (a
folder must be at the same path on every node). Its :meth:`~TextModelSource.identity` is what an
embedding store records to tell one model from another: the name, the dimension, and a SHA-256
fingerprint of the weights, the tokenizer's vocabulary and the module pipeline's configuration.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from contrastlab.audit.config import AuditConfig
from contrastlab.audit.inputs import BUNDLED_MODEL, TextEncoder, load_model
from contrastlab.audit.recorded_prompts import resolve_prompts
from contrastlab.export.runtime import OnnxTextEncoder

__all__ = ["TextModelSource", "PromptedEncoder", "model_fingerprint", "max_seq_length"]


def model_fingerprint(encoder: TextEncoder | OnnxTextEncoder) -> str:
    """``sha256:<hex>`` of a loaded text model: its weights, vocabulary and module configuration.

    Every state-dict tensor is hashed with its name, dtype and shape, in the state dict's order; the
    configuration is the pipeline's ``repr`` (modules, pooling mode) and its maximum sequence length. Two loads of
    the same files give the same fingerprint; a changed weight, token or setting gives another. An ONNX export
    is fingerprinted by its verified file listing (every file's size and SHA-256: graph and tokenizer) and
    its maximum sequence length.
    """
    h = hashlib.sha256()
    if isinstance(encoder, OnnxTextEncoder):
        h.update(f"onnx\0{encoder.max_seq_length}\0".encode())
        for name, entry in sorted(encoder.meta["files"].items()):
            h.update(f"{name}\0{entry['bytes']}\0{entry['sha256']}\0".encode())
        return f"sha256:{h.hexdigest()}"
    h.update(f"{encoder.model!r}\0{getattr(encoder.model, 'max_seq_length', None)}\0".encode())
    vocab = getattr(getattr(encoder.model, "tokenizer", None), "get_vocab", None)
    if callable(vocab):
        for token, index in sorted(vocab().items()):
            h.update(f"{token}\0{index}\0".encode())
    for name, t in encoder.model.state_dict().items():
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{h.hexdigest()}"


def max_seq_length(encoder: TextEncoder | OnnxTextEncoder) -> int:
    """The tokens per text a loaded model truncates at (its own, or the one it was loaded with)."""
    if isinstance(encoder, OnnxTextEncoder):
        return int(encoder.max_seq_length)
    return int(encoder.model.max_seq_length)


class PromptedEncoder:
    """A loaded text model that puts ``prompt`` before every text it encodes.

    Args:
        inner: the loaded model (:class:`~contrastlab.audit.inputs.TextEncoder` or an ONNX export).
        prompt: the string put before each text.
    """

    def __init__(self, inner: TextEncoder | OnnxTextEncoder, prompt: str) -> None:
        self.inner, self.prompt = inner, prompt
        self.description = f"{inner.description} (prompt {prompt!r})"
        self.normalizes = inner.normalizes

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """``(len(texts), D)`` embeddings of ``prompt + text``."""
        return self.inner([self.prompt + t for t in texts])


@dataclass(frozen=True)
class TextModelSource:
    """A text model to load where it is used.

    Attributes:
        name: what ``contrastlab audit`` takes: ``minilm`` (bundled), a sentence-transformers or Hugging
            Face folder, a name in the local Hugging Face cache (nothing is downloaded), or a text run of
            ``contrastlab train``.
        max_seq_length: tokens per text; longer texts are truncated; 0: the model's own ``max_seq_length``,
            as the audit truncates (:func:`~contrastlab.audit.inputs.load_model`).
        device: torch device.
        prompt: put before every text before encoding (e.g. ``"passage: "``); ``None``: the prompt the model
            records under ``prompt_name`` (:func:`~contrastlab.audit.recorded_prompts.recorded_prompts`), else none. The
            prompt used is part of the identity, so a store is never resumed with another prompt.
        prompt_name: which recorded prompt an unset ``prompt`` takes: ``"document"`` (a corpus of documents)
            or ``"query"`` (a file of queries).
    """

    name: str = BUNDLED_MODEL
    max_seq_length: int = 0
    device: str = "cpu"
    prompt: str | None = None
    prompt_name: Literal["query", "document"] = "document"

    def __post_init__(self) -> None:
        if self.prompt_name not in ("query", "document"):
            raise ValueError(f"prompt_name must be 'query' or 'document', got {self.prompt_name!r}")
        if isinstance(self.max_seq_length, bool) or not isinstance(self.max_seq_length, int) or self.max_seq_length < 0:
            raise ValueError(f"max_seq_length must be an int >= 0 (0: the model's own), got {self.max_seq_length!r}")

    def prompt_text(self) -> str:
        """The prompt put before every text: ``prompt``, or the model's recorded one for ``prompt_name``.

        Raises:
            ValueError: the file that records the model's prompts does not parse.
        """
        if self.prompt is not None:
            return self.prompt
        query, document = resolve_prompts(self.name, None, None)
        return query if self.prompt_name == "query" else document

    def load(self) -> TextEncoder | OnnxTextEncoder | PromptedEncoder:
        """Load the model (raw, pre-normalisation embeddings; see :class:`~contrastlab.audit.inputs.TextEncoder`).

        Raises:
            ValueError: the model cannot be found or loaded; the message names ``model``.
        """
        config = AuditConfig(model=self.name, max_seq_length=self.max_seq_length, device=self.device, progress=False)
        encoder = load_model(config)
        prompt = self.prompt_text()
        return PromptedEncoder(encoder, prompt) if prompt else encoder

    def identity(self, encoder: TextEncoder | OnnxTextEncoder | PromptedEncoder) -> dict[str, Any]:
        """The model's identity for a store: name, description, dim, max_seq_length, normalizes, fingerprint.

        A folder's name is its absolute path. The dimension is read from one encoded text.

        Raises:
            ValueError: the model's output is not one 2-D embedding.
        """
        with torch.inference_mode():
            probe = encoder(["dimension probe"])
        if probe.ndim != 2 or probe.shape[0] != 1:
            raise ValueError(f"model: {encoder.description} gives output of shape {tuple(probe.shape)}, not (1, D)")
        name = (
            self.name if self.name == BUNDLED_MODEL or not Path(self.name).exists() else str(Path(self.name).resolve())
        )
        inner = encoder.inner if isinstance(encoder, PromptedEncoder) else encoder
        fingerprint = model_fingerprint(inner)
        prompt = encoder.prompt if isinstance(encoder, PromptedEncoder) else ""
        if prompt:  # the same weights with a prompt embed other vectors: another identity
            fingerprint = "sha256:" + hashlib.sha256(f"{fingerprint}\0prompt\0{prompt}".encode()).hexdigest()
        return {
            "name": name,
            "description": encoder.description,
            "dim": int(probe.shape[1]),
            "max_seq_length": max_seq_length(inner),
            "normalizes": encoder.normalizes,
            "fingerprint": fingerprint,
            **({"prompt": prompt} if prompt else {}),
        }
