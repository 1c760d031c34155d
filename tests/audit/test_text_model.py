"""A text model's identity: the same files give the same fingerprint, other weights another."""

from __future__ import annotations

import pickle
from pathlib import Path

from contrastlab.audit.text_model import TextModelSource
from tests.models.text_models import write_tiny_bert


def test_identity_tells_models_apart(tmp_path: Path) -> None:
    a = write_tiny_bert(tmp_path / "a", "st", seed=0)
    b = write_tiny_bert(tmp_path / "b", "st", seed=1)
    source = TextModelSource(str(a))
    assert pickle.loads(pickle.dumps(source)) == source  # what a Ray actor receives
    first = source.identity(source.load())
    assert first == source.identity(source.load())  # loaded twice: the same identity
    assert first["name"] == str(a.resolve()) and first["dim"] == 16 and first["normalizes"] is True
    assert first["fingerprint"].startswith("sha256:") and len(first["fingerprint"]) == 71
    other = TextModelSource(str(b)).identity(TextModelSource(str(b)).load())
    assert other["fingerprint"] != first["fingerprint"] and other["dim"] == 16
    shorter = TextModelSource(str(a), max_seq_length=16).identity(TextModelSource(str(a), max_seq_length=16).load())
    assert shorter["fingerprint"] != first["fingerprint"]  # the configuration is part of the identity


def test_the_default_length_is_the_models_own_max_seq_length(tmp_path: Path) -> None:
    """As the audit: no length given, a text is truncated where the model itself truncates (the tiny BERT: 32)."""
    from sentence_transformers import SentenceTransformer

    from contrastlab.audit.text_model import max_seq_length

    folder = write_tiny_bert(tmp_path / "st", "st")
    own = SentenceTransformer(str(folder), device="cpu").max_seq_length
    assert own == 32
    source = TextModelSource(str(folder))
    encoder = source.load()
    assert max_seq_length(encoder) == own and source.identity(encoder)["max_seq_length"] == own
    shorter = TextModelSource(str(folder), max_seq_length=16)
    assert shorter.identity(shorter.load())["max_seq_length"] == 16
