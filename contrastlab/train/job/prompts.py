"""Per-column prompts of a text run: :class:`PromptsConfig` (e.g. ``query: `` and ``passage: ``, as E5 is trained).

A prompt is a string put before every text of its column, before tokenising: the query prompt before each
anchor (and each dev query), the document prompt before each positive, negative and dev document. The run's
sentence-transformers folder saves them as its ``prompts`` (``{"query": ..., "document": ...}`` in
``config_sentence_transformers.json``), so ``SentenceTransformer(folder).encode(texts, prompt_name="query")``
embeds queries as the run did; ``contrastlab encode``, ``mine`` and ``audit`` read them from the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from contrastlab.config import ConfigError, check_fields

__all__ = ["PromptsConfig"]


@dataclass(frozen=True)
class PromptsConfig:
    """The prompts of a text run's two columns (empty: none)."""

    query: str = ""
    """put before each anchor / query text, e.g. "query: " """
    document: str = ""
    """put before each positive, negative and document text, e.g. "passage: " """

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("query", "document"):
            if "\x00" in getattr(self, name):
                raise ConfigError(f"{name} must not hold a NUL character")

    @property
    def enabled(self) -> bool:
        """Whether any prompt is set."""
        return bool(self.query or self.document)

    def as_st_prompts(self) -> dict[str, str]:
        """The ``prompts`` of a sentence-transformers model: ``{"query": ..., "document": ...}`` (the set ones)."""
        return {k: v for k, v in (("query", self.query), ("document", self.document)) if v}
