"""Named random streams: a seed for every (base seed, purpose, index), independent of every other.

Experiments draw several streams from one user seed — the world, each encoder's initialisation, each
repetition's training batches, the held-out evaluation set. Arithmetic such as ``100 + 7919 * s + k`` or
``seed + 1`` makes streams collide (``seed = 1``'s evaluation stream is ``seed = 2``'s world) and hides
what each draw is for. Here each stream is named, and its seed is NumPy's ``SeedSequence`` of the base
seed with the spawn key ``(crc32(name), *index)``: the same name and index always give the same seed, in
any process (``crc32`` is stable where Python's ``hash`` is salted), and distinct keys give
statistically independent streams (O'Neill's seed-sequence hashing, as NumPy documents for ``spawn``).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

__all__ = ["seed_stream", "stream_generator", "stream_rng"]


def seed_stream(base: int, name: str, *index: int) -> int:
    """The seed of stream ``name`` (and ``index``, e.g. a repetition and a k) under the base seed.

    Args:
        base: the user's seed, an int ≥ 0.
        name: what the stream is for (``"eval"``, ``"tuples"``, ...).
        *index: further ints ≥ 0 that tell streams of the same name apart (repetition, k, ...).

    Returns:
        An int in ``[0, 2^32)``: accepted wherever a seed is (``torch.manual_seed``, NumPy's legacy
        ``np.random.seed``, :class:`~contrastlab.train.TrainConfig`'s ``seed``, which the trainer multiplies
        by about 10^6 for its per-step streams). Two distinct keys share a seed with probability 2^-32.

    Raises:
        TypeError: ``base`` or an index is not an int, or ``name`` is not a string.
        ValueError: ``base`` or an index is negative, or ``name`` is empty.

    Examples:
        >>> seed_stream(0, "eval") == seed_stream(0, "eval")
        True
        >>> len({seed_stream(0, "tuples", s, k) for s in range(3) for k in range(3)})
        9
    """
    for label, v in (("base", base), *((f"index[{i}]", x) for i, x in enumerate(index))):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{label} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{label} must be >= 0, got {v}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("name must be a non-empty string")
    key = (zlib.crc32(name.encode("utf-8")), *(int(i) for i in index))
    return int(np.random.SeedSequence(int(base), spawn_key=key).generate_state(1, dtype=np.uint32)[0])


def stream_generator(base: int, name: str, *index: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with :func:`seed_stream` ``(base, name, *index)``."""
    return torch.Generator(device=device).manual_seed(seed_stream(base, name, *index))


def stream_rng(base: int, name: str, *index: int) -> np.random.Generator:
    """A NumPy ``Generator`` seeded with :func:`seed_stream` ``(base, name, *index)``."""
    return np.random.default_rng(seed_stream(base, name, *index))
