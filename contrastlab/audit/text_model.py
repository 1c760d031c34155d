"""A text model named as ``contrastlab audit`` names it, loadable wherever it runs, with its identity.

:class:`TextModelSource` is a small picklable value (a name, a sequence length, a device): ``contrastlab
encode`` loads it once in its own process, and each Ray actor loads its own copy from the same name (a
folder must be at the same path on every node). Its :meth:`~TextModelSource.identity` is what an
embedding store records to tell one model from another: the name, the dimension, and a SHA-256
fingerprint of the weights, the tokenizer's vocabulary and the module pipeline's configuration.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from contrastlab.audit.config import AuditConfig
from contrastlab.audit.inputs import BUNDLED_MODEL, TextEncoder, load_model
from contrastlab.export.runtime import OnnxTextEncoder

__all__ = ["TextModelSource", "PromptedEncoder", "model_fingerprint"]


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
            Face folder, or a name in the local Hugging Face cache (nothing is downloaded).
        max_seq_length: tokens per text; longer texts are truncated.
        device: torch device.
        prompt: put before every text before encoding (e.g. ``"passage: "``, the prompt the model was trained
            with); part of the identity, so a store is never resumed with another prompt.
    """

    name: str = BUNDLED_MODEL
    max_seq_length: int = 128
    device: str = "cpu"
    prompt: str = ""

    def load(self) -> TextEncoder | OnnxTextEncoder | PromptedEncoder:
        """Load the model (raw, pre-normalisation embeddings; see :class:`~contrastlab.audit.inputs.TextEncoder`).

        Raises:
            ValueError: the model cannot be found or loaded; the message names ``model``.
        """
        config = AuditConfig(model=self.name, max_seq_length=self.max_seq_length, device=self.device, progress=False)
        encoder = load_model(config)
        return PromptedEncoder(encoder, self.prompt) if self.prompt else encoder

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
        if self.prompt:  # the same weights with a prompt embed other vectors: another identity
            fingerprint = "sha256:" + hashlib.sha256(f"{fingerprint}\0prompt\0{self.prompt}".encode()).hexdigest()
        return {
            "name": name,
            "description": encoder.description,
            "dim": int(probe.shape[1]),
            "max_seq_length": self.max_seq_length,
            "normalizes": encoder.normalizes,
            "fingerprint": fingerprint,
            **({"prompt": self.prompt} if self.prompt else {}),
        }
