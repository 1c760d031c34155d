"""``norms-vs-uncertainty``: tiny end-to-end runs on digits (blends) and on a fake CIFAR-10 + CIFAR-10H folder."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.eval.calibration import auroc
from contrastlab.eval.norms import spearman
from contrastlab.experiments import get_experiment
from contrastlab.experiments import norms_vs_uncertainty as nv

TINY = nv.Config(
    dataset="digits", encoder="mlp", width=16, embed_dim=8, steps=3, batch_size=32, train_subset=200,
    corpus_size=150, n_blends=120, n_boot=20, device="cpu",
)  # fmt: skip


def _check(res: dict, out: Path) -> None:
    assert set(res) == {"summary", "metrics", "tables", "figures"}
    json.dumps(res)
    for f in res["figures"]:
        assert (out / f["file"]).stat().st_size > 5000
    for t in res["tables"]:
        assert all(len(row) == len(t["columns"]) for row in t["rows"])


def test_tiny_run_on_blended_digits(tmp_path: Path) -> None:
    res = nv.run(TINY, tmp_path)
    _check(res, tmp_path)
    m = res["metrics"]
    assert -1 <= m["spearman_norm_entropy_low"] <= m["spearman_norm_entropy"] <= m["spearman_norm_entropy_high"] <= 1
    assert 0 <= m["auroc_low_norm_ambiguous"] <= 1 and 0 < m["ambiguous_fraction"] < 1
    # w ~ U(0.5, 1) and "ambiguous" = w <= 0.8: about 60% of the blends
    assert abs(m["ambiguous_fraction"] - 0.6) < 0.15
    low_norm = res["tables"][0]["rows"][0]
    assert low_norm[1] == pytest.approx(-m["spearman_norm_entropy"]) and low_norm[4] == m["auroc_low_norm_ambiguous"]
    assert {r[0] for r in res["tables"][1]["rows"]} == {"norm", "msp", "msp_norm_temperature"}
    assert (tmp_path / "train" / "metrics.jsonl").exists()
    assert "blended" in res["summary"]


def _fake_cifar(root: Path, n_train: int, n_test: int, rng: np.random.Generator) -> None:
    # the CIFAR-10 "python version" layout, tiny batches of random images
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for name, n in [*((f"data_batch_{i}", n_train) for i in range(1, 6)), ("test_batch", n_test)]:
        batch = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, n)],
        }
        (d / name).write_bytes(pickle.dumps(batch))
    names = [n.encode() for n in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                                  "truck")]  # fmt: skip
    (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}))


def test_auto_picks_cifar10_with_cifar10h(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    _fake_cifar(tmp_path, 20, 60, rng)
    counts = rng.multinomial(50, np.full(10, 0.1), size=60)
    np.save(tmp_path / "cifar10h-counts.npy", counts)
    train, ev, name = nv._load(nv.Config(data_root=str(tmp_path)))
    assert name == "cifar10" and len(train) == 100 and ev.images.shape == (60, 3, 32, 32)
    assert torch.allclose(ev.probs, torch.from_numpy(counts / 50.0))
    # the registry's cifar10h: test images labelled with the human majority, train = CIFAR-10's train split
    from contrastlab.data import load_dataset

    reg = load_dataset("cifar10h", tmp_path, "test")
    assert torch.equal(reg.labels, torch.from_numpy(counts.argmax(1))) and torch.equal(reg.images, ev.images)
    assert len(load_dataset("cifar10h", tmp_path, "train")) == 100
    # augmentation-diversity picks CIFAR-10 from the same folder (it needs no CIFAR-10H)
    from contrastlab.experiments import augmentation_diversity as ad

    tr, te, ad_name = ad._load(ad.Config(data_root=str(tmp_path), train_subset=30))
    assert ad_name == "cifar10" and len(tr) == 30 and len(te) == 60 and tr.image_shape == (3, 32, 32)
    # a CIFAR-10H file for another set of images is refused before any training
    np.save(tmp_path / "cifar10h-counts.npy", counts[:59])
    with pytest.raises(ValueError, match=r"shape \(60, 10\)"):
        nv._load(nv.Config(dataset="cifar10", data_root=str(tmp_path)))


def test_tiny_run_on_fake_cifar10h(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    data = tmp_path / "data"
    _fake_cifar(data, 16, 60, rng)
    np.save(data / "cifar10h-counts.npy", rng.multinomial(50, rng.dirichlet(np.full(10, 0.3)), size=60))
    c = nv.Config(**{**TINY.__dict__, "dataset": "auto", "data_root": str(data), "train_subset": 0})
    res = nv.run(c, tmp_path / "out")
    _check(res, tmp_path / "out")
    assert "CIFAR-10H" in res["summary"] and "stand in" not in res["summary"]


def test_metrics_are_the_stated_statistics(tmp_path: Path) -> None:
    # recompute ρ and the AUROC from the trained encoder's norms: the experiment reports exactly these
    res = nv.run(TINY, tmp_path)
    train, ev, _ = nv._load(TINY)
    enc, _ = nv._train(train, TINY, tmp_path / "again")
    with torch.no_grad():
        norms = enc(ev.images).double().norm(dim=1).numpy()
    entropy = ev.entropy.numpy()
    assert res["metrics"]["spearman_norm_entropy"] == pytest.approx(spearman(norms, entropy), abs=1e-6)
    amb = ev.probs.max(1).values.numpy() <= TINY.ambiguous_max_prob
    assert res["metrics"]["auroc_low_norm_ambiguous"] == pytest.approx(auroc(-norms, amb), abs=1e-6)


def test_registered_and_arguments_named(tmp_path: Path) -> None:
    assert get_experiment("norms-vs-uncertainty") is nv
    with pytest.raises(ValueError, match="^ambiguous_max_prob"):
        nv.run(nv.Config(ambiguous_max_prob=1.0), tmp_path)
    with pytest.raises(ValueError, match="^dataset"):
        nv.run(nv.Config(dataset="mnist"), tmp_path)


def test_partial_spearman() -> None:
    rng = np.random.default_rng(0)
    z = rng.standard_normal(4000)
    # x and y related only through z: nothing is left once z is partialled out
    x, y = z + 0.3 * rng.standard_normal(4000), z + 0.3 * rng.standard_normal(4000)
    assert spearman(x, y) > 0.8 and abs(nv.partial_spearman(x, y, z)) < 0.06
    # z unrelated to x and y: partialling changes little
    w = rng.standard_normal(4000)
    assert nv.partial_spearman(x, y, w) == pytest.approx(spearman(x, y), abs=0.01)
