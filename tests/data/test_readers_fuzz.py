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

from contrastlab.data import (
    DatasetFormatError,
    load_cifar10,
    load_imagenet32,
    load_stl10,
    load_svhn,
    load_tiny_imagenet,
)
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


def test_svhn_unknown_array_class_is_a_format_error(tmp_path: Path) -> None:
    # found by atheris: scipy's compiled reader raised UnboundLocalError for an unknown array class
    FAMILIES["svhn"].seeds(tmp_path, 0)  # uncompressed: the first array's flags are at byte 144
    mat = tmp_path / "test_32x32.mat"
    raw = bytearray(mat.read_bytes())
    raw[144] = 19  # MATLAB array classes are 1..17
    mat.write_bytes(bytes(raw))
    with pytest.raises(DatasetFormatError, match="is not a readable MATLAB v5 file: array class 19"):
        load_svhn(tmp_path, "test")


def test_svhn_file_that_crashed_scipy_is_a_format_error(tmp_path: Path) -> None:
    # found by atheris: scipy.io.loadmat dies with a segmentation fault on this input (a crash-* artifact);
    # the reader is now contrastlab.data.mat5, which checks every size before reading
    crash = sorted((Path(__file__).resolve().parents[2] / "fuzz" / "findings" / "svhn").glob("crash-*"))[0]
    assert assert_contract("svhn", crash.read_bytes()) == "error"


@pytest.mark.parametrize("compress", [False, True])
def test_mat5_reads_what_scipy_writes(tmp_path: Path, compress: bool) -> None:
    from scipy.io import savemat

    from contrastlab.data.mat5 import read_mat5

    arrays = {
        "X": np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
        "y": np.array([[1.5], [-2.0]]),
        "i": np.array([[7, -8]], dtype=np.int16),
    }
    savemat(str(tmp_path / "a.mat"), arrays, do_compression=compress)
    got = read_mat5(tmp_path / "a.mat")
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v)


def test_mat5_inflates_at_most_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # deflate cannot expand more than ~1032x, so the bound is exercised with a smaller one
    import zlib

    from contrastlab.data import mat5
    from contrastlab.data.mat5 import read_mat5

    monkeypatch.setattr(mat5, "MAX_DEFLATE_RATIO", 10)
    payload = zlib.compress(b"\0" * 10_000_000, 9)  # ~10 kB that inflate to 10 MB
    header = b"MATLAB 5.0 MAT-file".ljust(116) + b"\0" * 8 + b"\x00\x01IM"
    (tmp_path / "a.mat").write_bytes(header + struct.pack("<II", 15, len(payload)) + payload)
    with memory_cap(MEMORY_BUDGET), pytest.raises(DatasetFormatError, match="inflates beyond its size bound"):
        read_mat5(tmp_path / "a.mat")
