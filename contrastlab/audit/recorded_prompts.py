"""The prompts a model records, read back where it is used: ``contrastlab audit``, ``mine`` and ``encode``.

A text run of ``contrastlab train`` records the strings it put before each query and each document
(:class:`~contrastlab.train.job.prompts.PromptsConfig`) in its ``config.json``, and its sentence-transformers
folder (``RUN/model``, or ``contrastlab export RUN --st OUT``) saves them as the model's ``prompts`` in
``config_sentence_transformers.json``. :func:`recorded_prompts` reads them from either; a
sentence-transformers folder's document prompt is the first of ``document``, ``passage`` and ``corpus``
it names, the names sentence-transformers' ``encode_document`` tries in that order. :func:`resolve_prompts`
gives the prompts a command uses: an explicit prompt (the empty string included) wins, an unset one
(``None``) takes the recorded one.
"""

from __future__ import annotations

import json
from pathlib import Path

from contrastlab.audit.inputs import _is_run_folder
from contrastlab.train.job.prompts import PromptsConfig

__all__ = ["recorded_prompts", "resolve_prompts", "ST_CONFIG", "DOCUMENT_PROMPT_NAMES"]

ST_CONFIG = "config_sentence_transformers.json"
"""The file of a sentence-transformers folder that holds its ``prompts``."""

DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
"""The prompt names a document prompt is looked up under, in order (sentence-transformers' ``encode_document``)."""


def recorded_prompts(model: str) -> PromptsConfig:
    """The query and document prompts ``model`` records (empty when it records none).

    Args:
        model: as ``contrastlab audit`` takes it: a contrastlab run folder (its ``config.json``'s
            ``prompts``), a sentence-transformers folder (the ``prompts`` of its
            ``config_sentence_transformers.json``: ``query``, and the first of
            :data:`DOCUMENT_PROMPT_NAMES`), or anything else (``minilm``, a cache name, an ONNX export, a
            ``.npy``), which records none.

    Raises:
        ValueError: the file that records them does not parse, or its prompts are not strings (named, with
            ``model``).
        contrastlab.io.CorruptFileError: a run's ``config.json`` fails its checksum.
    """
    path = Path(model)
    if not path.is_dir():
        return PromptsConfig()
    if _is_run_folder(path):
        from contrastlab.io import read_json_verified

        prompts = read_json_verified(path / "config.json").get("prompts") or {}
        source = path / "config.json"
        names: dict[str, tuple[str, ...]] = {"query": ("query",), "document": ("document",)}
    elif (path / ST_CONFIG).is_file():
        source = path / ST_CONFIG
        try:
            prompts = json.loads(source.read_text(encoding="utf-8")).get("prompts") or {}
        except (ValueError, AttributeError) as e:
            raise ValueError(f"model: {source} is not a JSON object ({e})") from None
        names = {"query": ("query",), "document": DOCUMENT_PROMPT_NAMES}
    else:
        return PromptsConfig()
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ValueError(f"model: the prompts of {source} must map names to strings, got {prompts!r}")
    found = {col: next((prompts[n] for n in keys if prompts.get(n)), "") for col, keys in names.items()}
    return PromptsConfig(query=found["query"], document=found["document"])


def resolve_prompts(model: str, query: str | None, document: str | None) -> tuple[str, str]:
    """``(query prompt, document prompt)`` a command uses: each given one, else the one ``model`` records.

    Raises:
        ValueError: as :func:`recorded_prompts` (read only when a prompt is unset).
    """
    if query is not None and document is not None:
        return query, document
    recorded = recorded_prompts(model)
    return (recorded.query if query is None else query, recorded.document if document is None else document)
