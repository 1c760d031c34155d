"""Text identity as the model sees it: :func:`text_keys`, the token ids of each text after the tokenizer.

Two texts are the same to a text encoder when its tokenizer turns them into the same token ids: its own
normalisation (BERT's lower-casing, accent stripping, white space) and the truncation to
``encoder.max_seq_length`` tokens included. Those ids are the exact key of a text for keeping duplicates
out of each other's negatives (:mod:`contrastlab.data.conflict_free`).
"""

from __future__ import annotations

from collections.abc import Sequence

from contrastlab.train.dataconf import ConfigError
from contrastlab.train.job_config import EncoderConfig

__all__ = ["text_keys", "tokenizer_folder"]


def tokenizer_folder(encoder: EncoderConfig) -> str:
    """The folder the encoder's tokenizer loads from (the bundled MiniLM's, or ``encoder.path``).

    Raises:
        contrastlab.train.ConfigError: the encoder is not a text encoder, or its weights are not installed.
    """
    from contrastlab.models.text import TEXT_ENCODERS, bundled_minilm_path

    if encoder.name not in TEXT_ENCODERS:
        raise ConfigError(f"encoder.name {encoder.name!r} is not a text encoder; {', '.join(sorted(TEXT_ENCODERS))}")
    if encoder.path is not None:
        return encoder.path
    try:
        return bundled_minilm_path()
    except ValueError as e:
        raise ConfigError(f"encoder.{e}") from None


def text_keys(encoder: EncoderConfig, texts: Sequence[str]) -> list[tuple[int, ...]]:
    """The token ids (special tokens included, truncated to ``encoder.max_seq_length``) of each text.

    Each text is stripped first, as sentence-transformers' input module does before tokenising.

    Raises:
        contrastlab.train.ConfigError: the encoder's folder has no tokenizer that loads (naming ``encoder.path``).
    """
    from transformers import AutoTokenizer

    folder = tokenizer_folder(encoder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError(f"encoder.path: no tokenizer loads from {folder}: {e}") from None
    ids = tokenizer([t.strip() for t in texts], truncation=True, max_length=encoder.max_seq_length)["input_ids"]
    return [tuple(int(t) for t in row) for row in ids]
