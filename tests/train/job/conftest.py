"""Fixtures shared by the job tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.text_models import write_tiny_bert


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sentence-transformers folder (random BERT weights, seed 0), written once per test module."""
    return write_tiny_bert(tmp_path_factory.mktemp("models") / "st", "st")


@pytest.fixture()
def bert_job_yaml(tmp_path: Path, bert: Path) -> Path:
    """``job.yaml`` of a text job on :func:`bert` with no pairs file: each test adds the rest on the command line."""
    config = tmp_path / "job.yaml"
    config.write_text(
        "data: {name: text, batch_size: 4}\n"
        f"encoder: {{name: sentence_transformers, path: '{bert}', out_dim: 16, max_seq_length: 12}}\n"
        "eval: {n: 3}\n"
    )
    return config
