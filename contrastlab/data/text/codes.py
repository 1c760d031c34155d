"""Texts as integer tensors: the form in which text batches travel through the training loop.

:func:`~contrastlab.train.fit` moves batches to the device, shards them across ranks
(:func:`contrastlab.distributed.shard_rows`) and splits the rows the encoder embeds into mini-batches for
gradient caching (:mod:`contrastlab.train.loop.grad_cache`) — all by slicing tensors along the first axis. A
list of strings supports none of that, so a text batch is a ``(N, L)`` ``int32`` tensor: row ``i`` holds
the Unicode code points of text ``i`` plus one (so that 0 is free to mark padding), padded with 0 to the
longest text of the batch. The encoder turns the rows back into strings and tokenises them
(:class:`contrastlab.models.text.TransformerTextEncoder`); no tokenizer is needed to build a batch, and a
batch does not depend on the encoder that will read it.

Examples:
    >>> codes = texts_to_codes(["ab", "c"])
    >>> codes.tolist(), codes_to_texts(codes)
    ([[98, 99], [100, 0]], ['ab', 'c'])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["texts_to_codes", "codes_to_texts"]


def texts_to_codes(texts: Sequence[str]) -> Tensor:
    """``(len(texts), L)`` int32: code point + 1 per character, 0-padded to the longest text ``L``.

    Raises:
        ValueError: ``texts`` is empty.
        TypeError: an element is not a ``str``.
    """
    if len(texts) == 0:
        raise ValueError("texts must hold at least one text")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
    width = max(1, max(len(t) for t in texts))
    out = np.zeros((len(texts), width), dtype=np.int32)
    for i, t in enumerate(texts):
        if t:
            # UTF-32-LE is one little-endian 32-bit code point per character, surrogates included
            out[i, : len(t)] = np.frombuffer(t.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int32) + 1
    return torch.from_numpy(out)


def codes_to_texts(codes: Tensor) -> list[str]:
    """The texts of ``(N, L)`` integer rows made by :func:`texts_to_codes` (trailing zeros dropped).

    Raises:
        ValueError: ``codes`` is not 2-D, or holds values outside ``[0, 0x110000]``.
    """
    if codes.ndim != 2 or codes.is_floating_point():
        raise ValueError(f"codes must be a 2-D integer tensor, got {codes.dtype} of shape {tuple(codes.shape)}")
    rows = codes.detach().cpu().numpy().astype(np.int64, copy=False)
    if rows.size and (rows.min() < 0 or rows.max() > 0x110000):
        raise ValueError("codes must hold code points + 1 in [0, 0x110000] (0: padding)")
    lengths = (rows != 0).cumsum(axis=1).argmax(axis=1) + 1  # one past the last non-zero column
    lengths[(rows == 0).all(axis=1)] = 0
    return [
        (rows[i, : lengths[i]] - 1).astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
        for i in range(rows.shape[0])
    ]
