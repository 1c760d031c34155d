"""CIFAR-10H loader on generated files in the published format, and on bad files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.data import DATASETS, DatasetNotFoundError, dataset_available, label_entropy, load_cifar10h
from contrastlab.data.cifar10h import CIFAR10H_COUNTS, CIFAR10H_PROBS


def _counts(n: int = 10000, k: int = 10, seed: int = 0) -> np.ndarray:
    # ~50 annotators per image, most agreeing: the shape and dtype of the published cifar10h-counts.npy
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.1), size=n)
    return np.stack([rng.multinomial(int(rng.integers(47, 64)), row) for row in p]).astype(np.float64)


def test_counts_file_in_published_format(tmp_path: Path) -> None:
    counts = _counts()
    np.save(tmp_path / CIFAR10H_COUNTS, counts)
    h = load_cifar10h(tmp_path)  # the folder: finds the counts file
    assert len(h) == 10000 and h.probs.shape == (10000, 10) and h.probs.dtype == torch.float64
    assert torch.allclose(h.probs.sum(1), torch.ones(10000, dtype=torch.float64))
    assert torch.equal(h.counts, torch.from_numpy(counts.astype(np.int64)))
    assert torch.equal(h.annotators, torch.from_numpy(counts.sum(1).astype(np.int64)))
    # entropy against a direct loop over the first rows
    for i in range(20):
        p = counts[i] / counts[i].sum()
        expected = -sum(x * math.log(x) for x in p if x > 0)
        assert h.entropy[i].item() == pytest.approx(expected, abs=1e-12)
    assert torch.equal(h.majority, torch.from_numpy(counts.argmax(1)))
    assert float(h.entropy.min()) >= 0 and float(h.entropy.max()) <= math.log(10) + 1e-12


def test_probs_file_and_repository_layout(tmp_path: Path) -> None:
    counts = _counts(seed=1)
    probs = counts / counts.sum(1, keepdims=True)
    folder = tmp_path / "cifar-10h" / "data"
    folder.mkdir(parents=True)
    np.save(folder / CIFAR10H_PROBS, probs.astype(np.float32))
    h = load_cifar10h(tmp_path)
    assert h.counts is None and h.annotators is None
    assert torch.allclose(h.probs, torch.from_numpy(probs), atol=1e-6)
    # the counts file wins when both are present
    np.save(tmp_path / CIFAR10H_COUNTS, counts.astype(np.int32))
    assert load_cifar10h(tmp_path).counts is not None


def test_entropy_closed_forms() -> None:
    p = torch.tensor([[1.0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0, 0]])
    assert label_entropy(p).tolist() == pytest.approx([0.0, math.log(4), math.log(2)])
    with pytest.raises(ValueError, match="probs"):
        label_entropy(torch.tensor([[-0.1, 1.1]]))


@pytest.mark.parametrize(
    ("name", "array", "match"),
    [
        (CIFAR10H_COUNTS, np.ones((9999, 10)), "shape"),
        (CIFAR10H_COUNTS, np.ones((10000, 9)), "shape"),
        (CIFAR10H_COUNTS, np.ones(10000), "shape"),
        (CIFAR10H_COUNTS, -np.ones((10000, 10)), "negative"),
        (CIFAR10H_COUNTS, np.full((10000, 10), 0.5), "integer"),
        (CIFAR10H_COUNTS, np.zeros((10000, 10)), "without any annotation"),
        (CIFAR10H_COUNTS, np.full((10000, 10), np.nan), "NaN"),
        (CIFAR10H_PROBS, np.full((10000, 10), 0.2), "sum to 1"),
        (CIFAR10H_COUNTS, np.array([["a"] * 10] * 10000), "numbers"),
    ],
)
def test_bad_files_are_refused_naming_the_path(tmp_path: Path, name: str, array: np.ndarray, match: str) -> None:
    np.save(tmp_path / name, array)
    with pytest.raises(ValueError, match=match) as err:
        load_cifar10h(tmp_path / name)
    assert str(err.value).startswith("path: ") and name in str(err.value)


def test_one_negative_count_is_refused(tmp_path: Path) -> None:
    counts = _counts()
    counts[123, 4] = -1
    np.save(tmp_path / CIFAR10H_COUNTS, counts)
    with pytest.raises(ValueError, match="negative"):
        load_cifar10h(tmp_path)


def test_pickled_object_array_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / CIFAR10H_COUNTS, np.array([object()] * 10, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="plain numeric"):
        load_cifar10h(tmp_path)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match=str(tmp_path / CIFAR10H_COUNTS)):
        load_cifar10h(tmp_path)


def test_any_shape_when_asked(tmp_path: Path) -> None:
    np.save(tmp_path / "subset.npy", np.array([[3, 1, 0], [0, 0, 2]]))
    h = load_cifar10h(tmp_path / "subset.npy", expected_shape=None)
    assert h.probs.tolist() == [[0.75, 0.25, 0.0], [0.0, 0.0, 1.0]]


def test_registered_for_contrastlab_data(tmp_path: Path) -> None:
    spec = DATASETS["cifar10h"]
    assert spec.splits == ("train", "test") and CIFAR10H_COUNTS in spec.files["test"]
    assert not dataset_available("cifar10h", tmp_path, "test")
    from contrastlab.cli import main

    assert main(["data", "cifar10h", "--root", str(tmp_path)]) == 0
