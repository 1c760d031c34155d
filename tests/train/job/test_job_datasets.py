"""The job's dataset registry: every entry of DATA_BUILDERS builds, batches and trains on tiny inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from contrastlab.train import TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, TextDataConfig, ViewsConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import build_encoder, check_job, make_loss_fn
from contrastlab.train.job.sources_config import SourceConfig, SourcesConfig
from tests.data.writers import WRITERS


def _text_inputs(tmp_path: Path) -> tuple[TextDataConfig, EncoderConfig]:
    """A small pairs file and a tiny randomly initialised BERT (the registry's ``text`` entry)."""
    from tests.models.text_models import write_tiny_bert

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("".join(f'"query {i}, in words","def f{i}()"\n' for i in range(16)), encoding="utf-8")
    bert = write_tiny_bert(tmp_path / "bert", "st")
    return TextDataConfig(path=str(pairs)), EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16)


@pytest.mark.parametrize("name", sorted(DATA_BUILDERS))
def test_every_dataset_builds_pure_batches_and_a_finite_loss_step(name: str, tmp_path: Path) -> None:
    if name in WRITERS:
        WRITERS[name](tmp_path, 3)
    texts = name in ("text", "sources")
    text, encoder = _text_inputs(tmp_path) if texts else (TextDataConfig(), EncoderConfig(hidden=(8,), out_dim=4))
    # the sources entry: the same pairs file as its one dataset
    sources = SourcesConfig(datasets=(SourceConfig(path=text.path, kind="pairs"),)) if name == "sources" else None
    config = JobConfig(
        data=DataConfig(
            name=name,
            root=str(tmp_path),
            batch_size=2,
            image_size=8,
            latent_dim=3,
            text=text,
            **({"sources": sources} if sources is not None else {}),
        ),
        views=ViewsConfig(crop_scale=(0.5, 1.0)),
        encoder=encoder,
        train=TrainConfig(steps=1, seed=3, progress=False),
        eval=EvalConfig(n=12),
    )
    source = DATA_BUILDERS[name](config)
    check_job(config, source)
    batch = source.batch_at(1)
    if source.kind == "texts":  # (N, L) code-point rows, L the batch's longest text
        assert batch["anchor"].shape[0] == 2 and batch["anchor"].shape == batch["positive"].shape
    else:
        assert batch["anchor"].shape == batch["positive"].shape == (2, *source.input_shape)
    again = source.batch_at(1)  # a pure function of the step: what makes resume exact
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert not torch.equal(source.batch_at(0)["anchor"], batch["anchor"])
    held = source.eval_batch
    assert 2 <= held["anchor"].shape[0] <= 12
    assert source.kind == "texts" or held["anchor"].shape[1:] == source.input_shape
    if source.kind == "texts":  # labels are the pairs' row numbers: every pair is its own class
        assert 0 <= int(batch["labels"].min()) and int(held["labels"].max()) < source.num_classes
        assert "negatives" not in batch and source.provenance is not None
    elif source.kind == "images":
        assert (
            source.input_shape[1:] == (8, 8) and 0 <= float(batch["anchor"].min()) <= float(batch["anchor"].max()) <= 1
        )
        assert held["clean"].shape == held["anchor"].shape and 0 <= float(held["clean"].min())
        assert 0 <= int(batch["labels"].min()) and int(held["labels"].max()) < source.num_classes
    else:
        assert "labels" not in batch and source.num_classes == 0
    torch.manual_seed(0)
    model = build_encoder(config, source)
    loss = make_loss_fn(config)(model, batch)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    trained = [p for p in model.parameters() if p.requires_grad]  # a text model freezes what it never uses
    assert trained and all(p.grad is not None and torch.isfinite(p.grad).all() for p in trained)
