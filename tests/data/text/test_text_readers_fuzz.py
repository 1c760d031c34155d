"""Fuzzing the text readers: any bytes give a valid object or one error naming the file.

``read_text_pairs`` (TSV, CSV, JSONL) returns :class:`TextPairs` or raises ``ValueError`` whose message
names the file; the code corpus's per-file parser returns a syntax tree or ``None`` (the file is skipped),
whatever the bytes — deeply nested source included, where CPython's parser raises ``RecursionError`` or
``MemoryError`` instead of ``SyntaxError``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrastlab.data.text.code_corpus import _parse
from contrastlab.data.text.pairs import TextPairs, read_text_pairs

SEEDS = {
    ".tsv": b"how do I sort a list\tsorted(iterable, key=None)\nparse json\tjson.loads(s)\tjson.dumps(o)\n",
    ".csv": b'anchor,positive\n"open a file, read it",open(path)\nsplit words,str.split()\n',
    ".jsonl": b'{"anchor": "a", "positive": "b", "negatives": ["c"]}\n["d", "e", "f"]\n',
}


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            i = min(pos, len(data) - 1)
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.sampled_from([b"\t", b",", b'"', b"\n", b"\r", b"\x00", b"\xff\xfe", b"{", b"["]))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
    return bytes(data)


def _contract(suffix: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"pairs{suffix}"
        path.write_bytes(data)
        try:
            out = read_text_pairs(path, header=suffix == ".csv")
        except ValueError as e:
            assert str(path) in str(e), str(e)
        else:
            assert isinstance(out, TextPairs) and len(out) >= 1


@pytest.mark.parametrize("suffix", sorted(SEEDS))
@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(data=st.data())
def test_pair_files_under_mutation(suffix: str, data: st.DataObject) -> None:
    _contract(suffix, data.draw(mutated(SEEDS[suffix])))


@pytest.mark.parametrize("suffix", sorted(SEEDS))
@settings(max_examples=30, derandomize=True, deadline=None, database=None)
@given(raw=st.binary(max_size=200))
def test_pair_files_of_arbitrary_bytes(suffix: str, raw: bytes) -> None:
    _contract(suffix, raw)


@pytest.mark.parametrize(
    "source",
    [
        "-" * 100_000 + "1",  # MemoryError: the parser's stack overflows
        "not " * 100_000 + "x",
        "a." * 200_000 + "b",  # RecursionError during AST construction
        "x = " + "1 + " * 100_000 + "1",
        "(" * 300,  # SyntaxError: too many nested parentheses
        "def f(:\n",
    ],
    ids=["unary", "not", "attribute", "binop", "parens", "syntax"],
)
def test_corpus_parser_skips_unparsable_source(tmp_path: Path, source: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _parse(path) is None


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(raw=st.binary(max_size=300))
def test_corpus_parser_takes_any_bytes(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.py"
        path.write_bytes(raw)
        tree = _parse(path)
        assert tree is None or tree.__class__.__name__ == "Module"
