"""The dataset readers under structured mutation, and one test per finding of the fuzzing campaign.

Contract (``fuzz/targets.py``): any bytes in any file of a dataset folder give a dataset or a documented
error (``DatasetFormatError``/``ValueError``, ``DatasetNotFoundError``, ``pickle.UnpicklingError`` for
CIFAR) whose message names the file, within a memory cap and a time limit.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrastlab.data import DatasetFormatError, load_cifar10, load_imagenet32, load_stl10, load_tiny_imagenet
from contrastlab.data.cifar import restricted_load
from fuzz.targets import FAMILIES, memory_cap
from tests._fuzzing import FUZZ_SETTINGS, MEMORY_BUDGET, assert_contract, mutated_inputs, seeds

DATA_FAMILIES = ["cifar", "stl10", "svhn", "imagenet32", "tiny_imagenet", "cifar10h"]


@pytest.mark.parametrize("family", DATA_FAMILIES)
def test_seeds_read(family: str) -> None:
    assert {assert_contract(family, s) for s in seeds(family)} == {"ok"}


@pytest.mark.parametrize("family", DATA_FAMILIES)
@FUZZ_SETTINGS
@given(data=st.data())
def test_contract_under_mutation(family: str, data: st.DataObject) -> None:
    assert_contract(family, data.draw(mutated_inputs(family)))


# ----------------------------------------------------------------------------- CIFAR pickles: one per finding
def _cifar_folder(tmp_path: Path, batch: bytes) -> Path:
    FAMILIES["cifar"].seeds(tmp_path, 0)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(batch)
    return tmp_path


def test_pickle_memo_index_does_not_size_memory(tmp_path: Path) -> None:
    # LONG_BINPUT 2**31 - 1: the C unpickler grows its memo array to that index (16 GiB); ours uses a dict
    batch = b"\x80\x02}r\xff\xff\xff\x7f."
    with memory_cap(MEMORY_BUDGET), pytest.raises(DatasetFormatError, match="does not hold a dict|no key"):
        load_cifar10(_cifar_folder(tmp_path, batch), "test")


def test_pickle_bytearray8_length_is_not_allocated(tmp_path: Path) -> None:
    # found by atheris: BYTEARRAY8 declaring 1.6 GB made the pure-Python unpickler allocate it up front
    batch = b"\x80\x04}\x96" + struct.pack("<Q", 0x620B4328) + b"."
    with memory_cap(MEMORY_BUDGET), pytest.raises(pickle.UnpicklingError, match="BYTEARRAY8") as e:
        load_cifar10(_cifar_folder(tmp_path, batch), "test")
    assert str(tmp_path) in str(e.value)


def test_pickle_cannot_call_ndarray_to_allocate(tmp_path: Path) -> None:
    # numpy.ndarray((10**10,)) through REDUCE would hand back 10 GB no byte of the file paid for
    batch = b"\x80\x02cnumpy\nndarray\n\x8a\x05\x00\xe4\x0bT\x02\x85\x85R."
    with memory_cap(MEMORY_BUDGET), pytest.raises(pickle.UnpicklingError, match="not a loadable") as e:
        load_cifar10(_cifar_folder(tmp_path, batch), "test")
    assert str(tmp_path) in str(e.value)


def test_pickle_aliased_nested_labels_are_not_expanded(tmp_path: Path) -> None:
    # 40 levels of [x, x] with shared references: 2**40 leaves if np.asarray expanded them
    inner: list = [0, 0]
    for _ in range(40):
        inner = [inner, inner]
    batch = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": inner}, protocol=2)
    with memory_cap(MEMORY_BUDGET), pytest.raises(DatasetFormatError, match="labels are not 2 integers"):
        load_cifar10(_cifar_folder(tmp_path, batch), "test")


def test_pickle_forbidden_global_names_the_file(tmp_path: Path) -> None:
    batch = b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueR."
    with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle global os.system") as e:
        restricted_load(_cifar_folder(tmp_path, batch) / "cifar-10-batches-py" / "test_batch")
    assert str(tmp_path) in str(e.value)


def test_cifar_label_out_of_range_names_the_folder(tmp_path: Path) -> None:
    batch = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, protocol=2)
    with pytest.raises(DatasetFormatError, match=r"labels must lie in \[0, 10\)") as e:
        load_cifar10(_cifar_folder(tmp_path, batch), "test")
    assert str(tmp_path) in str(e.value)


# ------------------------------------------------------------------------------------------ other readers
def test_stl10_label_out_of_range_names_the_file(tmp_path: Path) -> None:
    FAMILIES["stl10"].seeds(tmp_path, 0)
    (tmp_path / "stl10_binary" / "test_y.bin").write_bytes(b"\x0b")
    with pytest.raises(DatasetFormatError, match=r"test_y.bin labels must lie in 1\.\.10"):
        load_stl10(tmp_path, "test")


def test_stl10_class_names_not_utf8(tmp_path: Path) -> None:
    FAMILIES["stl10"].seeds(tmp_path, 0)
    (tmp_path / "stl10_binary" / "class_names.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(DatasetFormatError, match="class_names.txt is not UTF-8"):
        load_stl10(tmp_path, "test")


def test_imagenet32_npz_claiming_huge_member_is_refused(tmp_path: Path) -> None:
    FAMILIES["imagenet32"].seeds(tmp_path, 0)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        header = (
            b"\x93NUMPY\x01\x00v\x00"
            + b"{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000, 3072), }".ljust(117)
            + b"\n"
        )
        zf.writestr("data.npy", header)
        zf.writestr("labels.npy", header)
    (tmp_path / "Imagenet32_val_npz" / "val_data.npz").write_bytes(buf.getvalue())
    with memory_cap(MEMORY_BUDGET), pytest.raises(DatasetFormatError, match="declares shape"):
        load_imagenet32(tmp_path, "val")


def test_tiny_imagenet_annotation_cannot_name_a_path(tmp_path: Path) -> None:
    FAMILIES["tiny_imagenet"].seeds(tmp_path, 0)
    ann = tmp_path / "tiny-imagenet-200" / "val" / "val_annotations.txt"
    ann.write_text("../../../../../etc/hostname\tn01443537\n")
    with pytest.raises(DatasetFormatError, match="not a file name"):
        load_tiny_imagenet(tmp_path, "val")
    ann.write_text("no tab here\n")
    with pytest.raises(DatasetFormatError, match="line 1 is not"):
        load_tiny_imagenet(tmp_path, "val")


def test_tiny_imagenet_jpeg_size_is_checked_before_decoding(tmp_path: Path) -> None:
    FAMILIES["tiny_imagenet"].seeds(tmp_path, 0)
    jpeg = tmp_path / "tiny-imagenet-200" / "val" / "images" / "val_0.JPEG"
    data = jpeg.read_bytes()
    sof = data.index(b"\xff\xc0")  # baseline frame header: length, precision, height, width
    for side, message in ((5000, "is 5000x5000; images must be at most 1024 a side"), (60000, "DecompressionBomb")):
        jpeg.write_bytes(data[: sof + 5] + struct.pack(">HH", side, side) + data[sof + 9 :])
        with memory_cap(MEMORY_BUDGET), pytest.raises(DatasetFormatError, match=message):
            load_tiny_imagenet(tmp_path, "val")
