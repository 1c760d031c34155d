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
