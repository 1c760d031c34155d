import os
import stat

import pytest

from contrastlab.io import atomic_path, write_json_atomic


def test_atomic_write_is_complete_and_readable(tmp_path):
    p = tmp_path / "sub" / "r.json"
    write_json_atomic(p, {"a": 1.5, "nan": float("nan")})
    assert p.read_text().strip().startswith("{")
    assert '"nan": null' in p.read_text()
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]  # no temp file left behind


def test_failed_write_leaves_the_old_file(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert p.read_text() == "old"
    assert [f.name for f in tmp_path.iterdir()] == ["r.txt"]


# ---------------------------------------------------------------------------------- checksummed files

import hashlib  # noqa: E402
import json  # noqa: E402

from contrastlab.io import (  # noqa: E402
    CHECKSUM_KEY,
    SEAL_BYTES,
    CorruptFileError,
    open_sealed_zip,
    read_json_verified,
    seal_zip,
)

_OBJ = {"name": "run", "metrics": {"loss": 0.125, "k": [1, 2, 3]}, "ok": True, "none": None, "text": "é ☃"}


@pytest.mark.parametrize("obj", [_OBJ, {}, {"a": {}}, {"a": []}])
def test_json_round_trip_is_plain_json_with_the_checksum_last(tmp_path, obj):
    p = tmp_path / "r.json"
    write_json_atomic(p, obj)
    plain = json.loads(p.read_text())  # any JSON reader parses it
    assert list(plain)[-1] == CHECKSUM_KEY
    # the digest is that of the file without its checksum line: json.dumps of the object itself
    assert plain[CHECKSUM_KEY] == hashlib.sha256(json.dumps(obj, indent=2).encode()).hexdigest()
    assert read_json_verified(p) == obj


def test_every_single_byte_change_of_a_json_file_is_refused(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, _OBJ)
    good = p.read_bytes()
    for i in range(len(good)):  # every position, including the checksum line itself
        bad = bytearray(good)
        bad[i] ^= 0x01
        p.write_bytes(bytes(bad))
        with pytest.raises(CorruptFileError, match="r.json"):
            read_json_verified(p)
    for cut in (0, 1, len(good) // 2, len(good) - 1):  # truncation
        p.write_bytes(good[:cut])
        with pytest.raises(CorruptFileError, match="r.json"):
            read_json_verified(p)
    p.write_bytes(good + b" ")  # an appended byte moves the checksum line off the end
    with pytest.raises(CorruptFileError, match="r.json"):
        read_json_verified(p)


def test_json_without_checksum_is_refused_unless_not_required(tmp_path):
    p = tmp_path / "user.json"
    p.write_text(json.dumps({"a": 1}))
    with pytest.raises(CorruptFileError, match="user.json.*checksum"):
        read_json_verified(p)
    assert read_json_verified(p, required=False) == {"a": 1}
    p.write_text("[1, 2]")
    with pytest.raises(CorruptFileError, match="user.json must hold a JSON object"):
        read_json_verified(p, required=False)
    p.write_text("{not json")
    with pytest.raises(CorruptFileError, match="user.json is not valid JSON"):
        read_json_verified(p, required=False)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        read_json_verified(tmp_path / "missing.json")


def test_json_writer_refuses_what_it_cannot_checksum(tmp_path):
    with pytest.raises(TypeError, match="^obj must be a dict"):
        write_json_atomic(tmp_path / "l.json", [1, 2])
    with pytest.raises(ValueError, match="^obj must not have"):
        write_json_atomic(tmp_path / "c.json", {CHECKSUM_KEY: "x"})
    assert not list(tmp_path.iterdir())


def _zip_archive() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("a/data.bin", bytes(range(256)) * 3)
        z.writestr("a/meta.txt", "hello")
    return buffer.getvalue()


def test_a_sealed_zip_is_still_a_zip_and_detects_any_change_truncation_and_extension():
    import io
    import zipfile

    magic = b"\x89TESTZP\n"
    archive = _zip_archive()
    data = seal_zip(archive, magic)
    assert len(data) == len(archive) + SEAL_BYTES
    with zipfile.ZipFile(io.BytesIO(data)) as z:  # any zip reader still reads it
        assert z.read("a/meta.txt") == b"hello" and z.testzip() is None
    assert open_sealed_zip(data, magic, "f.zip") is data
    for i in range(len(data)):  # every byte, the seal's own included
        bad = bytearray(data)
        bad[i] ^= 0x80
        with pytest.raises(CorruptFileError, match="^f.zip "):
            open_sealed_zip(bytes(bad), magic, "f.zip")
    for cut in (0, 3, 22, len(data) - SEAL_BYTES, len(data) - 1):
        with pytest.raises(CorruptFileError, match="^f.zip has no contrastlab checksum"):
            open_sealed_zip(data[:cut], magic, "f.zip")
    with pytest.raises(CorruptFileError, match="^f.zip has no contrastlab checksum"):
        open_sealed_zip(data + b"\0", magic, "f.zip")
    with pytest.raises(CorruptFileError, match="^f.zip has no contrastlab checksum"):
        open_sealed_zip(archive, magic, "f.zip")  # an unsealed zip
    with pytest.raises(ValueError, match="^archive must be a zip"):
        seal_zip(data, magic)  # already has a comment
    with pytest.raises(ValueError, match="^magic must be 8 bytes"):
        seal_zip(archive, b"short")
