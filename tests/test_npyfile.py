"""``contrastlab.npyfile``: headers are checked against the bytes present before anything is allocated."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from contrastlab.npyfile import (
    MAX_DEFLATE_RATIO,
    NpyFormatError,
    load_npy,
    load_npy_bytes,
    load_npz,
    read_npy_header,
)
from fuzz.targets import memory_cap

CAP = 1 << 30


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, np.bool_, np.complex64])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("mmap", [False, True])
def test_round_trip(tmp_path: Path, dtype: type, order: str, mmap: bool) -> None:
    a = np.asarray(np.arange(24).reshape(2, 3, 4) % 3, dtype=dtype, order=order)  # type: ignore[call-overload]
    np.save(tmp_path / "a.npy", a)
    b = load_npy(tmp_path / "a.npy", mmap=mmap)
    assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
    assert b.flags.f_contiguous == (order == "F")


@pytest.mark.parametrize("shape", [(0,), (0, 5), (), (2, 3)])
def test_bytes_round_trip_and_size_check(shape: tuple[int, ...]) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    buf = io.BytesIO()
    np.save(buf, a)
    data = buf.getvalue()
    b = load_npy_bytes(data, "a.npy")
    assert b.shape == shape and np.array_equal(a, b) and not b.flags.writeable
    with pytest.raises(NpyFormatError, match="a.npy is corrupted: its header declares"):
        load_npy_bytes(data + b"\0", "a.npy")
    with pytest.raises(NpyFormatError, match="a.npy is not a valid .npy file"):
        load_npy_bytes(b"\x93NUMP", "a.npy")


@pytest.mark.parametrize("shape", [(0,), (0, 5), ()])
def test_empty_and_scalar(tmp_path: Path, shape: tuple[int, ...]) -> None:
    np.save(tmp_path / "a.npy", np.zeros(shape, np.float32))
    assert load_npy(tmp_path / "a.npy").shape == shape
    assert load_npy(tmp_path / "a.npy", mmap=True).shape == shape


def test_version_2_header(tmp_path: Path) -> None:
    a = np.arange(6.0)
    with open(tmp_path / "a.npy", "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    assert np.array_equal(load_npy(tmp_path / "a.npy"), a)


def _with_header(tmp_path: Path, old: bytes, new: bytes) -> Path:
    p = tmp_path / "a.npy"
    np.save(p, np.ones((2, 3), np.float32))
    data = p.read_bytes()
    assert old in data and len(new) - len(old) < 40
    # keep the header's length (numpy pads it with spaces before its newline)
    edited = (
        data.replace(old, new).replace(b" " * (len(new) - len(old)) + b"\n", b"\n", 1)
        if len(new) > len(old)
        else data.replace(old, new).replace(b"\n", b" " * (len(old) - len(new)) + b"\n", 1)
    )
    p.write_bytes(edited)
    return p


@pytest.mark.parametrize("shape", [b"(1000000000000, 3)", b"(4294967296, 4294967296)", b"(2, 4)", b"(1, 3)"])
def test_header_disagreeing_with_size_is_refused_before_allocating(tmp_path: Path, shape: bytes) -> None:
    p = _with_header(tmp_path, b"(2, 3)", shape)
    with memory_cap(CAP):
        for mmap in (False, True):
            with pytest.raises(NpyFormatError, match=rf"{p} is corrupted: its header declares shape"):
                load_npy(p, mmap=mmap)


@pytest.mark.parametrize("descr", [b"'|O'", b"[('a', '|O')]"])
def test_object_dtype_is_refused(tmp_path: Path, descr: bytes) -> None:
    p = _with_header(tmp_path, b"'<f4'", descr)
    with pytest.raises(NpyFormatError, match="object array"):
        read_npy_header(p)


@pytest.mark.parametrize(
    "data", [b"", b"\x93NUMPY", b"\x93NUMPY\x03\x00\x00\x00", b"\x93NUMPY\x01\x00\xff\xff{", b"PK\x03\x04 not npy"]
)
def test_malformed_headers_name_the_file(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "bad.npy"
    p.write_bytes(data)
    with pytest.raises(NpyFormatError, match=str(p)):
        load_npy(p)


def test_trailing_bytes_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "a.npy"
    np.save(p, np.ones(3))
    p.write_bytes(p.read_bytes() + b"\x00")
    with pytest.raises(NpyFormatError, match="holds 25 data bytes"):
        load_npy(p)


def _npz(tmp_path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    p = tmp_path / "a.npz"
    with zipfile.ZipFile(p, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return p


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_round_trip(tmp_path: Path, save) -> None:  # type: ignore[no-untyped-def]
    save(tmp_path / "a.npz", data=np.arange(12, dtype=np.uint8).reshape(3, 4), labels=np.arange(3))
    out = load_npz(tmp_path / "a.npz", ("data", "labels"))
    assert np.array_equal(out["data"], np.arange(12).reshape(3, 4)) and out["labels"].tolist() == [0, 1, 2]


def test_npz_missing_member(tmp_path: Path) -> None:
    p = _npz(tmp_path, {"data.npy": _npy_bytes(np.ones(2))})
    with pytest.raises(NpyFormatError, match=r"has no array 'labels' \(it has \['data'\]\)"):
        load_npz(p, ("data", "labels"))


def test_npz_other_compression_is_refused(tmp_path: Path) -> None:
    p = _npz(tmp_path, {"data.npy": _npy_bytes(np.ones(2))}, zipfile.ZIP_BZIP2)
    with pytest.raises(NpyFormatError, match="compression method 12"):
        load_npz(p, ("data",))


def test_npz_bad_crc_is_detected(tmp_path: Path) -> None:
    p = _npz(tmp_path, {"data.npy": _npy_bytes(np.arange(100, dtype=np.uint8))})
    raw = bytearray(p.read_bytes())
    raw[raw.index(bytes(range(90, 99)))] ^= 1  # a data byte of the stored member
    p.write_bytes(bytes(raw))
    with pytest.raises(NpyFormatError, match="Bad CRC-32"):
        load_npz(p, ("data",))


def test_npz_declared_size_beyond_deflate_ratio_is_refused(tmp_path: Path) -> None:
    p = _npz(tmp_path, {"data.npy": _npy_bytes(np.zeros(100_000, np.uint8))}, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(p) as zf:
        info = zf.getinfo("data.npy")
    raw = bytearray(p.read_bytes())
    claimed = MAX_DEFLATE_RATIO * info.compress_size + 20_000
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size, local and central header
        pos = raw.index(sig)
        raw[pos + off : pos + off + 4] = claimed.to_bytes(4, "little")
    p.write_bytes(bytes(raw))
    with memory_cap(CAP), pytest.raises(NpyFormatError, match=f"claims {claimed} bytes"):
        load_npz(p, ("data",))


def test_not_a_zip(tmp_path: Path) -> None:
    p = tmp_path / "a.npz"
    p.write_bytes(b"\x93NUMPY nope")
    with pytest.raises(NpyFormatError, match=rf"{p} is not a readable .npz archive"):
        load_npz(p, ("data",))


def test_header_length_is_checked_before_the_header_is_read(tmp_path: Path) -> None:
    # found by atheris (cifar10h): numpy reads a version-2 header of its declared length (here 2 GiB)
    # before comparing it with max_header_size, so a 12-byte file made it allocate 2 GiB
    p = tmp_path / "a.npy"
    p.write_bytes(b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little"))
    with memory_cap(CAP), pytest.raises(NpyFormatError, match="header length 2147483648, at most 10000"):
        load_npy(p)
