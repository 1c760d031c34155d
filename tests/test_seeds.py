"""Named random streams: reproducible across processes, distinct per (base, name, index), validated."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from contrastlab.seeds import seed_stream, stream_generator, stream_rng


def test_same_key_same_seed_in_another_process():
    here = [seed_stream(3, "tuples", 1, 64), seed_stream(0, "eval")]
    code = "from contrastlab.seeds import seed_stream; print(seed_stream(3, 'tuples', 1, 64), seed_stream(0, 'eval'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert [int(v) for v in out] == here  # crc32 of the name, not Python's salted hash


def test_distinct_keys_give_distinct_seeds_in_range():
    keys = [(b, n, *i) for b in range(4) for n in ("eval", "train", "tuples") for i in ((), (0,), (1,), (0, 1), (1, 0))]
    seeds = [seed_stream(*k) for k in keys]
    assert len(set(seeds)) == len(keys)  # 240 keys; a collision has probability < 240² / 2³³ ≈ 7e-6
    assert all(0 <= s < 2**32 for s in seeds)
    # the arithmetic this replaces collides: (seed 0, "seed + 1" stream) is (seed 1, base stream)
    assert seed_stream(0, "eval") != seed_stream(1, "world")


def test_generators_replay_their_stream():
    a = torch.rand(5, generator=stream_generator(7, "views", 2))
    b = torch.rand(5, generator=stream_generator(7, "views", 2))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, torch.rand(5, generator=stream_generator(7, "views", 3)))
    np.testing.assert_array_equal(stream_rng(7, "split").random(4), stream_rng(7, "split").random(4))
    torch.manual_seed(seed_stream(2**31, "init", 10**6))  # large bases and indices are accepted by torch


@pytest.mark.parametrize(
    ("args", "exc", "name"),
    [
        ((-1, "a"), ValueError, "base"),
        ((1.0, "a"), TypeError, "base"),
        ((True, "a"), TypeError, "base"),
        ((0, ""), ValueError, "name"),
        ((0, 3), TypeError, "name"),
        ((0, "a", -2), ValueError, r"index\[0\]"),
        ((0, "a", 1, "2"), TypeError, r"index\[1\]"),
    ],
)
def test_bad_arguments_name_themselves(args, exc, name):
    with pytest.raises(exc, match=f"^{name}"):
        seed_stream(*args)
