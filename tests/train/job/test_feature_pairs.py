"""`contrastlab train` on stored pairs with mined hard negatives, and with gradient caching."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.search import EmbeddingIndex, mine_hard_negatives
from contrastlab.train import ConfigError, OptimConfig, TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.runner import run_job

N, M, F, K = 120, 200, 6, 3
REPO = Path(__file__).resolve().parents[3]


def _write(root: Path, mined: bool = True) -> np.ndarray | None:
    """Pairs whose positives are corpus rows; negatives mined with the identity 'encoder' (the raw inputs)."""
    g = np.random.default_rng(0)
    corpus = g.standard_normal((M, F)).astype(np.float32)
    pos = g.permutation(M)[:N]
    anchors = corpus[pos] + 0.2 * g.standard_normal((N, F)).astype(np.float32)
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "anchors.npy", anchors)
    np.save(root / "positives.npy", corpus[pos])
    if not mined:
        return None
    np.save(root / "corpus.npy", corpus)
    index = EmbeddingIndex(F)
    index.add(corpus)
    result = mine_hard_negatives(index, anchors, corpus[pos], num_negatives=K, exclude_ids=pos, margin=0.05)
    result.save(root / "negatives.npz")
    return result.ids


def _config(root: Path, **train) -> JobConfig:
    return JobConfig(
        data=DataConfig(name="pairs", root=str(root), batch_size=16),
        encoder=EncoderConfig(hidden=(16,), out_dim=4),
        loss=LossConfig(name="info_nce", temperature=0.2),
        train=TrainConfig(steps=4, log_every=2, progress=False, optim=OptimConfig(name="sgd", lr=0.1), **train),
        eval=EvalConfig(n=24),
    )


def test_batches_carry_the_mined_negatives_of_their_anchors(tmp_path: Path):
    ids = _write(tmp_path)
    source = DATA_BUILDERS["pairs"](_config(tmp_path))
    corpus, anchors = np.load(tmp_path / "corpus.npy"), np.load(tmp_path / "anchors.npy")
    batch = source.batch_at(5)
    assert batch["negatives"].shape == (16, K, F)
    for i in range(16):  # find each anchor's row, then check its negatives are corpus[ids[row]]
        row = int(np.flatnonzero((anchors == batch["anchor"][i].numpy()).all(axis=1))[0])
        assert row < N - 24 and (ids[row] >= 0).all()  # a training row with all K negatives
        assert np.array_equal(batch["negatives"][i].numpy(), corpus[ids[row]])
    assert source.eval_batch["anchor"].shape == (24, F) and "negatives" not in source.eval_batch


def test_train_command_uses_mined_negatives(tmp_path: Path):
    _write(tmp_path / "data")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"data": {"name": "pairs", "root": str(tmp_path / "data"), "batch_size": 16},
                               "encoder": {"hidden": [16], "out_dim": 4}, "eval": {"n": 24},
                               "train": {"steps": 3, "log_every": 1, "progress": False}}))  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "contrastlab", "train", str(job), "--out", str(tmp_path / "run")]
    proc = subprocess.run(
        [*args, "--train.embed_minibatch", "20"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["config"]["train"]["embed_minibatch"] == 20 and results["metrics"]["train_loss"] > 0


def test_job_with_embed_minibatch_trains_like_without(tmp_path: Path):
    _write(tmp_path / "data")
    models = []
    for mb in (None, 13):  # 16 anchors + 16 positives + 48 negatives = 80 rows: 6 × 13 + 2
        run_job(_config(tmp_path / "data", embed_minibatch=mb), tmp_path / f"run{mb}")
        models.append(torch.load(tmp_path / f"run{mb}" / "checkpoint.pt", weights_only=True)["model"])
    for key, want in models[0].items():
        # float32, the same sums over other row blocks, 4 SGD steps: a few ulps of the largest entry
        assert (models[1][key] - want).abs().max() <= 1e-5 * want.abs().max(), key


def test_bad_pairs_folders_are_named(tmp_path: Path):
    with pytest.raises(ConfigError, match="^data.root must name"):
        DATA_BUILDERS["pairs"](replace(_config(tmp_path), data=DataConfig(name="pairs", batch_size=16)))
    with pytest.raises(ConfigError, match="^data.root .* has no anchors.npy"):
        DATA_BUILDERS["pairs"](_config(tmp_path / "empty"))
    _write(tmp_path / "half", mined=False)
    np.save(tmp_path / "half" / "corpus.npy", np.zeros((4, F), dtype=np.float32))
    with pytest.raises(ConfigError, match="^data.root: mined negatives need both"):
        DATA_BUILDERS["pairs"](_config(tmp_path / "half"))
    _write(tmp_path / "full")
    with pytest.raises(ConfigError, match="^loss.name must be info_nce or dcl"):
        DATA_BUILDERS["pairs"](replace(_config(tmp_path / "full"), loss=LossConfig(name="nt_xent")))
    with pytest.raises(ConfigError, match="^data.root: .* < data.batch_size"):
        DATA_BUILDERS["pairs"](replace(_config(tmp_path / "full"), eval=EvalConfig(n=110)))
