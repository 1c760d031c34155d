"""The corpus format of ``contrastlab encode``: ids, line endings, folders, and every refusal."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from contrastlab.scale.corpus import TextCorpus


def test_file_lines_are_documents(tmp_path: Path):
    f = tmp_path / "c.txt"
    f.write_bytes("zero\r\none\n\nthree ünï\nfour".encode())  # CRLF, an empty document, no final newline
    c = TextCorpus.scan(f, stride=2)
    assert (c.kind, c.count, c.offsets) == ("file", 5, (0, 10, 23))
    assert c.sha256 == hashlib.sha256(f.read_bytes()).hexdigest() and c.bytes == f.stat().st_size
    assert c.read(0, 5) == ["zero", "one", "", "three ünï", "four"]
    assert c.read(2, 4) == ["", "three ünï"] and c.read(4, 5) == ["four"]
    f.write_bytes(f.read_bytes() + b"\n")  # a final newline adds no document
    assert TextCorpus.scan(f, stride=2).count == 5
    for start in range(5):  # any start: seek to the recorded offset before it, skip the lines between
        for stop in range(start + 1, 6):
            assert c.read(start, stop) == ["zero", "one", "", "three ünï", "four"][start:stop]
    for bad in ((4, 6), (3, 3), (-1, 2)):
        with pytest.raises(ValueError, match="not a non-empty range"):
            c.read(*bad)


def test_folder_txt_files_in_name_order(tmp_path: Path):
    d = tmp_path / "docs"
    d.mkdir()
    for name, text in (("b.txt", "second\nstill second"), ("a.txt", "first"), ("c.md", "not text"), ("c.txt", "")):
        (d / name).write_text(text)
    (d / "sub.txt").mkdir()  # a folder, even if named *.txt, is not a document
    c = TextCorpus.scan(d, stride=10)
    assert (c.kind, c.count, c.files) == ("dir", 3, ("a.txt", "b.txt", "c.txt"))
    assert c.read(0, 3) == ["first", "second\nstill second", ""]
    (d / "a.txt").write_text("First")
    assert TextCorpus.scan(d, stride=10).sha256 != c.sha256


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "the file is empty"),
        (b"ok\nbad \xff byte\n", r"c\.txt, line 2: bytes that are not UTF-8 at column 5"),
        (b"ok\nok\nnul\x00here\n", r"c\.txt, line 3: holds a NUL byte at column 4"),
    ],
)
def test_bad_file_refused_naming_file_and_line(tmp_path: Path, content: bytes, match: str):
    (tmp_path / "c.txt").write_bytes(content)
    with pytest.raises(ValueError, match=match):
        TextCorpus.scan(tmp_path / "c.txt", stride=4)


def test_bad_folder_or_path_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="no such file or folder"):
        TextCorpus.scan(tmp_path / "missing.txt", stride=4)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.md").write_text("x")
    with pytest.raises(ValueError, match="holds no \\*.txt files"):
        TextCorpus.scan(tmp_path / "d", stride=4)
    (tmp_path / "d" / "y.txt").write_bytes(b"\xc3")
    with pytest.raises(ValueError, match=r"y\.txt: bytes that are not UTF-8"):
        TextCorpus.scan(tmp_path / "d", stride=4)


def test_a_corpus_shortened_after_the_scan_is_refused_on_reading(tmp_path: Path):
    f = tmp_path / "c.txt"
    f.write_text("a\nb\nc\nd\n")
    c = TextCorpus.scan(f, stride=2)
    f.write_text("a\nb\nc\n")
    with pytest.raises(ValueError, match="ends before line 4; the corpus changed"):
        c.read(2, 4)
