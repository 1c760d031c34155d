"""Structured mutations of valid files (hypothesis strategies) and the reader contract as an assertion.

The families, their seed files and the contract live in ``fuzz/targets.py`` (shared with the atheris
harness ``fuzz/run.py``). Here a hypothesis strategy draws a valid seed input of a family and applies
one to three structured mutations: bit flips, truncation, splicing in bytes or a copied chunk, binary
integers overwritten with extreme values, and decimal numbers or known header tokens replaced by extreme
ones (a shape of ``(10**12,)``, an object dtype, a negative count). Every example runs under a memory cap
(an allocation the file does not pay for fails) and a time limit.
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from fuzz.targets import FAMILIES, ContractViolation, check, memory_cap, seed_inputs

MEMORY_BUDGET = 1 << 30
"""Address space one read may add: far above what the tiny seed files need, far below 10**12 elements."""

SECONDS = 10.0
"""Time one read may take (the seeds read in milliseconds)."""

FUZZ_SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Deterministic (derandomized, no example database), bounded, and free of timing flakiness."""

EXTREME_INTS = (0, 1, 2**7, 2**8 - 1, 2**15, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**40, 2**62, 2**63 - 1, 2**64 - 1)
EXTREME_NUMBERS = (
    b"0",
    b"-1",
    b"1000000000000",
    b"99999999999999999999999",
    b"1e400",
    b"-1e400",
    b"nan",
    b"1" * 5000,
    b"2147483648",
    b"18446744073709551616",
)
# tokens of the formats under test and extreme replacements (a mutation swaps one occurrence)
TOKENS: tuple[tuple[bytes, tuple[bytes, ...]], ...] = (
    (b"'shape': (", (b"'shape': (1000000000000, ", b"'shape': (-1, ", b"'shape': (4294967296, 4294967296, ")),
    (b"'descr': '", (b"'descr': '|O', 'x': '", b"'descr': '<V1000000000', 'x': '", b"'descr': [('a', '|O')], 'x': '")),
    (b"'fortran_order': False", (b"'fortran_order': True", b"'fortran_order': 1")),
    (b'"ntotal": ', (b'"ntotal": 1e400, "x": ', b'"ntotal": -1, "x": ', b'"ntotal": 1000000000000, "x": ')),
    (b'"dim": ', (b'"dim": 1000000000000, "x": ', b'"dim": 0, "x": ', b'"dim": "4", "x": ')),
    (b'"files": {', (b'"files": {"/dev/zero": {"bytes": 0, "sha256": ""}, ', b'"files": {"../meta.json": {}, ')),
    (b"temperature", (b"temperature: &a [*a]\nx", b"temperature: [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]\nx")),
    (b"numpy", (b"os\nsystem\n", b"builtins\neval\n", b"numpy\nndarray\n")),
    (b"\x94", (b"\x96",)),  # pickle MEMOIZE -> BYTEARRAY8
    (b"q\x00", (b"r\xff\xff\xff\x7f",)),  # pickle BINPUT 0 -> LONG_BINPUT 2**31 - 1
    (b"PK\x03\x04", (b"PK\x03\x04\x14\x00\x01\x00\x0c\x00",)),  # zip local header: encrypted, bzip2
    (b"\xff\xc0\x00\x11\x08", (b"\xff\xc0\x00\x11\x08\xff\xff\xff\xff",)),  # JPEG SOF0: 65535 x 65535
    (b"\t", (b"\t../../../etc/hostname\t", b"")),
    (b"MATLAB", (b"MATLAB 5.0 \xff\xff\xff\xff",)),
)


@functools.cache
def seeds(family: str) -> tuple[bytes, ...]:
    """The family's valid seed inputs (written once per test session)."""
    return tuple(seed_inputs(FAMILIES[family]))


def _flip(data: bytes, bit: int) -> bytes:
    if not data:
        return data
    bit %= 8 * len(data)
    b = bytearray(data)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def _overwrite_int(data: bytes, pos: int, width: int, value: int, order: str) -> bytes:
    if len(data) < width:
        return data
    pos %= len(data) - width + 1
    raw = (value % (1 << (8 * width))).to_bytes(width, order)  # type: ignore[arg-type]
    return data[:pos] + raw + data[pos + width :]


def _replace_number(data: bytes, which: int, new: bytes) -> bytes:
    spans = [m.span() for m in re.finditer(rb"-?\d+(\.\d+)?", data[1:])]
    if not spans:
        return data
    s, e = spans[which % len(spans)]
    return data[: 1 + s] + new + data[1 + e :]


def _replace_token(data: bytes, which: int, pick: int) -> bytes:
    present = [(tok, reps) for tok, reps in TOKENS if tok in data[1:]]
    if not present:
        return data
    tok, reps = present[which % len(present)]
    return data[:1] + data[1:].replace(tok, reps[pick % len(reps)], 1)


def _splice(data: bytes, pos: int, insert: bytes, delete: int) -> bytes:
    pos = 1 + pos % max(1, len(data))
    return data[:pos] + insert + data[pos + delete :]


def _copy_chunk(data: bytes, src: int, length: int, dst: int) -> bytes:
    if len(data) < 2:
        return data
    src = 1 + src % (len(data) - 1)
    chunk = data[src : src + length]
    dst = 1 + dst % (len(data) - 1)
    return data[:dst] + chunk + data[dst:]


def _mutation() -> st.SearchStrategy:
    """One structured mutation: a function ``bytes -> bytes`` (the selector byte is left alone except by flips)."""
    return st.one_of(
        st.builds(lambda bit: lambda d: d[:1] + _flip(d[1:], bit), st.integers(0, 2**20)),
        st.builds(lambda n: lambda d: d[: 1 + n % max(1, len(d))], st.integers(0, 2**20)),
        st.builds(
            lambda p, ins, dl: lambda d: _splice(d, p, ins, dl),
            st.integers(0, 2**20),
            st.binary(max_size=16),
            st.integers(0, 16),
        ),
        st.builds(
            lambda s, n, t: lambda d: _copy_chunk(d, s, n, t),
            st.integers(0, 2**20),
            st.integers(1, 512),
            st.integers(0, 2**20),
        ),
        st.builds(
            lambda p, w, v, o: lambda d: d[:1] + _overwrite_int(d[1:], p, w, v, o),
            st.integers(0, 2**20),
            st.sampled_from((1, 2, 4, 8)),
            st.sampled_from(EXTREME_INTS),
            st.sampled_from(("little", "big")),
        ),
        st.builds(
            lambda w, n: lambda d: _replace_number(d, w, n), st.integers(0, 64), st.sampled_from(EXTREME_NUMBERS)
        ),
        st.builds(lambda w, p: lambda d: _replace_token(d, w, p), st.integers(0, 16), st.integers(0, 8)),
    )


@st.composite
def mutated_inputs(draw: st.DrawFn, family: str) -> bytes:
    """A valid seed input of ``family`` with one to three structured mutations applied."""
    data = draw(st.sampled_from(seeds(family)))
    for mutate in draw(st.lists(_mutation(), min_size=1, max_size=3)):
        data = mutate(data)
    return data


def assert_contract(family: str, data: bytes) -> str:
    """Read ``data`` as ``family`` under the memory cap and time limit; fail the test on a violation.

    Returns:
        ``"ok"`` or ``"error"`` (a documented error naming the file).
    """
    with tempfile.TemporaryDirectory() as tmp, memory_cap(MEMORY_BUDGET):
        try:
            return check(FAMILIES[family], data, Path(tmp), seconds=SECONDS)
        except ContractViolation as v:
            raise AssertionError(f"{v}\ninput: {data[:200]!r}... ({len(data)} bytes)") from v
