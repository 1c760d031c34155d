"""Each loader reads tiny files written here in the dataset's standard distributed format."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.data import (
    DATASETS,
    DatasetNotFoundError,
    ImageDataset,
    dataset_available,
    load_cifar10,
    load_cifar100,
    load_dataset,
    load_digits,
    load_imagenet32,
    load_stl10,
    load_svhn,
    load_tiny_imagenet,
)
from contrastlab.data.cifar import restricted_load
from tests.data.writers import RNG, cifar_batch, py2_style_pickle, write_cifar10


def test_cifar10_reads_python_batches(tmp_path: Path) -> None:
    written = write_cifar10(tmp_path)
    train = load_cifar10(tmp_path, "train")
    assert train.images.shape == (15, 3, 32, 32) and train.images.dtype == torch.uint8
    expected = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    assert np.array_equal(train.images.numpy(), expected)  # R, G, B planes land in channels 0, 1, 2
    assert train.labels.tolist() == sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    assert train.classes[1] == "automobile" and train.name == "cifar10/train"
    test = load_cifar10(tmp_path / "cifar-10-batches-py", "test")  # the extracted folder itself works too
    assert np.array_equal(test.images.numpy(), written["test_batch"][0])
    assert load_dataset("cifar10", tmp_path, "test").labels.tolist() == written["test_batch"][1]


def test_cifar100_fine_and_coarse(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    fine, coarse = [3, 99, 0, 42], [1, 19, 0, 7]
    data, images = cifar_batch(4, {"fine_labels": fine, "coarse_labels": coarse})
    (folder / "train").write_bytes(data)
    (folder / "test").write_bytes(data)
    meta = {b"fine_label_names": [f"f{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"c{i}".encode() for i in range(20)]}  # fmt: skip
    (folder / "meta").write_bytes(py2_style_pickle(meta))
    ds = load_cifar100(tmp_path, "train")
    assert ds.labels.tolist() == fine and ds.num_classes == 100 and ds.classes[99] == "f99"
    assert np.array_equal(ds.images.numpy(), images)
    ds_c = load_cifar100(tmp_path, "test", label_type="coarse")
    assert ds_c.labels.tolist() == coarse and ds_c.num_classes == 20


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned_marker",))


def test_restricted_unpickler_refuses_code(tmp_path: Path) -> None:
    path = tmp_path / "evil"
    path.write_bytes(pickle.dumps({"data": _Evil()}, protocol=4))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system|nt.system"):
            restricted_load(path)
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "pwned_marker").exists()


def test_restricted_unpickler_refuses_object_arrays_and_other_globals(tmp_path: Path) -> None:
    path = tmp_path / "obj"
    path.write_bytes(pickle.dumps({"data": np.array([1, "a"], dtype=object)}, protocol=4))
    with pytest.raises(pickle.UnpicklingError, match="object dtype"):
        restricted_load(path)
    path.write_bytes(pickle.dumps({"data": Path("x")}, protocol=4))
    with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle global pathlib"):
        restricted_load(path)
    path.write_bytes(pickle.dumps({"x": "abc".encode("utf-16")}, protocol=2).replace(b"latin1", b"utf_16"))
    with pytest.raises(pickle.UnpicklingError, match="refusing _codecs.encode"):
        restricted_load(path)
    # the allowed types still load, at protocol 2 and 4
    value = {b"a": [1, 2, b"x", "y"], "arr": np.arange(6, dtype=np.uint8).reshape(2, 3)}
    for protocol in (2, 4):
        path.write_bytes(pickle.dumps(value, protocol=protocol))
        out = restricted_load(path)
        assert out[b"a"] == [1, 2, b"x", "y"] and np.array_equal(out["arr"], value["arr"])


def test_cifar10_refuses_a_malicious_batch(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(pickle.dumps(_Evil(), protocol=2))
    with pytest.raises(pickle.UnpicklingError):
        load_cifar10(tmp_path, "train")


def test_stl10_binary_is_column_major(tmp_path: Path) -> None:
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    images = RNG.integers(0, 256, size=(2, 3, 96, 96), dtype=np.uint8)  # (N, C, H, W)
    (folder / "train_X.bin").write_bytes(images.transpose(0, 1, 3, 2).tobytes())  # stored column-major
    (folder / "train_y.bin").write_bytes(np.array([1, 10], dtype=np.uint8).tobytes())
    (folder / "class_names.txt").write_text("\n".join(f"name{i}" for i in range(10)) + "\n")
    ds = load_stl10(tmp_path, "train")
    assert ds.images.shape == (2, 3, 96, 96)
    assert np.array_equal(ds.images.numpy(), images)
    assert ds.labels.tolist() == [0, 9] and ds.classes[9] == "name9"
    (folder / "unlabeled_X.bin").write_bytes(images.transpose(0, 1, 3, 2).tobytes())
    assert load_dataset("stl10", tmp_path, "unlabeled").labels.tolist() == [-1, -1]


def test_svhn_mat(tmp_path: Path) -> None:
    from scipy.io import savemat

    images = RNG.integers(0, 256, size=(3, 3, 32, 32), dtype=np.uint8)  # (N, C, H, W)
    savemat(tmp_path / "test_32x32.mat", {"X": images.transpose(2, 3, 1, 0), "y": np.array([[10], [1], [9]])})
    ds = load_svhn(tmp_path, "test")
    assert np.array_equal(ds.images.numpy(), images)
    assert ds.labels.tolist() == [0, 1, 9]  # label 10 is the digit 0


def test_imagenet32_npz(tmp_path: Path) -> None:
    train_dir, val_dir = tmp_path / "Imagenet32_train_npz", tmp_path / "Imagenet32_val_npz"
    train_dir.mkdir()
    val_dir.mkdir()
    all_images, all_labels = [], []
    for i in range(1, 11):
        images = RNG.integers(0, 256, size=(2, 3, 32, 32), dtype=np.uint8)
        labels = RNG.integers(1, 1001, size=2)
        np.savez(train_dir / f"train_data_batch_{i}.npz", data=images.reshape(2, -1), labels=labels.tolist(),
                 mean=np.zeros(3072))  # fmt: skip
        all_images.append(images)
        all_labels += (labels - 1).tolist()
    ds = load_imagenet32(tmp_path, "train")
    assert ds.images.shape == (20, 3, 32, 32) and ds.num_classes == 1000
    assert np.array_equal(ds.images.numpy(), np.concatenate(all_images))
    assert ds.labels.tolist() == all_labels
    assert not dataset_available("imagenet32", tmp_path, "test")
    np.savez(val_dir / "val_data.npz", data=all_images[0].reshape(2, -1), labels=np.array([1, 1000]))
    assert dataset_available("imagenet32", tmp_path, "test")
    assert load_dataset("imagenet32", tmp_path, "test").labels.tolist() == [0, 999]
    assert dataset_available("imagenet32", val_dir, "val")  # batches unpacked without their folder
    assert load_imagenet32(val_dir, "val").labels.tolist() == [0, 999]


def test_tiny_imagenet_folders(tmp_path: Path) -> None:
    from PIL import Image

    base = tmp_path / "tiny-imagenet-200"
    wnids = ["n01443537", "n01629819"]
    (base / "val" / "images").mkdir(parents=True)
    base.joinpath("wnids.txt").write_text("\n".join(wnids) + "\n")
    base.joinpath("words.txt").write_text(
        "n01443537\tgoldfish, Carassius auratus\nn01629819\tEuropean fire salamander\n"
    )
    colours = {wnids[0]: (200, 30, 30), wnids[1]: (20, 40, 220)}
    for w in wnids:
        d = base / "train" / w / "images"
        d.mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (64, 64), colours[w]).save(d / f"{w}_{i}.JPEG", quality=95)
    Image.new("L", (64, 64), 128).save(base / "train" / wnids[1] / "images" / f"{wnids[1]}_2.JPEG")  # grayscale
    Image.new("RGB", (64, 64), colours[wnids[1]]).save(base / "val" / "images" / "val_0.JPEG", quality=95)
    Image.new("RGB", (64, 64), colours[wnids[0]]).save(base / "val" / "images" / "val_1.JPEG", quality=95)
    (base / "val" / "val_annotations.txt").write_text(
        f"val_0.JPEG\t{wnids[1]}\t0\t0\t63\t63\nval_1.JPEG\t{wnids[0]}\t1\t2\t50\t60\n"
    )
    train = load_tiny_imagenet(tmp_path, "train")
    assert train.images.shape == (5, 3, 64, 64) and train.labels.tolist() == [0, 0, 1, 1, 1]
    assert train.classes == ("goldfish", "European fire salamander")
    mean_colour = train.images[0].float().mean(dim=(1, 2))
    assert torch.allclose(mean_colour, torch.tensor([200.0, 30.0, 30.0]), atol=3)  # JPEG is lossy
    assert (train.images[4].float() - 128).abs().max() <= 2  # the grayscale JPEG became RGB
    val = load_dataset("tiny-imagenet", tmp_path, "test")
    assert val.labels.tolist() == [1, 0]


@pytest.mark.parametrize("name", [n for n in DATASETS if n != "digits"])
def test_missing_root_says_where_to_put_files(tmp_path: Path, name: str) -> None:
    missing = tmp_path / "nowhere"
    split = DATASETS[name].splits[0]  # CIFAR-10H, say, has only a test split
    with pytest.raises(DatasetNotFoundError, match=f"root: {missing}"):
        load_dataset(name, missing, split)
    assert not dataset_available(name, missing)
    with pytest.raises(DatasetNotFoundError, match="never downloads") as info:
        load_dataset(name, tmp_path, split)  # the folder exists but is empty
    # the message names the expected paths under the root (CIFAR-10H needs CIFAR-10's files first)
    expected = [str(tmp_path / f) for f in DATASETS[name].files[split] if "*" not in f and "<" not in f]
    assert any(path in str(info.value) for path in expected)


def test_dataset_available_and_registry_errors(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    assert dataset_available("cifar10", tmp_path, "train") and dataset_available("cifar10", tmp_path, "test")
    assert dataset_available("cifar10", tmp_path / "cifar-10-batches-py")  # the extracted folder itself
    assert not dataset_available("cifar100", tmp_path)
    assert dataset_available("digits")
    with pytest.raises(ValueError, match="^name"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(ValueError, match="^split"):
        load_dataset("cifar10", tmp_path, "validation")


def test_digits_shapes_labels_and_split() -> None:
    train, test, full = load_digits("train"), load_digits("test"), load_digits("all")
    assert train.images.shape == (1437, 1, 8, 8) and test.images.shape == (360, 1, 8, 8)
    assert full.images.shape == (1797, 1, 8, 8) and full.images.dtype == torch.float32
    assert float(full.images.min()) == 0.0 and float(full.images.max()) == 1.0
    assert set(train.labels.tolist()) == set(range(10)) and full.num_classes == 10
    # stratified: every class holds about 20% of its images out
    for c in range(10):
        frac = (test.labels == c).sum() / (full.labels == c).sum()
        assert abs(float(frac) - 0.2) < 0.01

    # disjoint and complete: the multiset of (image, label) rows of train + test is that of all
    def rows(ds: ImageDataset) -> list[tuple[float, ...]]:
        flat = torch.cat([ds.images.flatten(1), ds.labels.unsqueeze(1).float()], 1)
        return sorted(map(tuple, flat.tolist()))

    assert sorted(rows(train) + rows(test)) == rows(full)
    again = load_digits("train")
    assert torch.equal(again.images, train.images) and torch.equal(again.labels, train.labels)
    other = load_digits("train", split_seed=1)
    assert not torch.equal(other.labels, train.labels)


def test_digits_upsampling() -> None:
    ds16, ds32 = load_digits("test", image_size=16), load_digits("test", image_size=32)
    assert ds16.images.shape == (360, 1, 16, 16) and ds32.images.shape == (360, 1, 32, 32)
    assert 0.0 <= float(ds32.images.min()) and float(ds32.images.max()) <= 1.0
    base = load_digits("test")
    # bilinear upsampling by 2 preserves the mean up to the border effect
    assert torch.allclose(ds16.images.mean(dim=(2, 3)), base.images.mean(dim=(2, 3)), atol=0.03)
    with pytest.raises(ValueError, match="^image_size"):
        load_digits(image_size=12)


def test_image_dataset_validation_and_helpers() -> None:
    with pytest.raises(ValueError, match="^labels"):
        ImageDataset(torch.zeros(3, 1, 4, 4), torch.tensor([0, 5, 1]), ("a", "b"), "x")
    with pytest.raises(ValueError, match="^images"):
        ImageDataset(torch.zeros(3, 4, 4), torch.tensor([0, 1, 1]), ("a", "b"), "x")
    with pytest.raises(TypeError, match="^labels"):
        ImageDataset(torch.zeros(3, 1, 4, 4), torch.tensor([0.0, 1.0, 1.0]), ("a", "b"), "x")
    ds = ImageDataset(torch.full((4, 3, 8, 8), 200, dtype=torch.uint8), torch.tensor([0, 1, 0, 1]), ("a", "b"), "x")
    small = ds.resized(4)
    assert small.images.shape == (4, 3, 4, 4) and small.images.dtype == torch.uint8
    assert int(small.images.min()) == 200 == int(small.images.max())
    assert torch.allclose(ds.float_images(), torch.full((4, 3, 8, 8), 200 / 255))
    sub = ds.subset(ds.labels == 1)
    assert len(sub) == 2 and sub.labels.tolist() == [1, 1]
