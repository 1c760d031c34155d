"""Texts as code-point rows: an exact round trip for any Unicode text, 0 reserved for padding."""

from __future__ import annotations

import pytest
import torch

from contrastlab.data.text.codes import codes_to_texts, texts_to_codes


def test_round_trip_of_any_text_including_empty_nul_astral_and_surrogates() -> None:
    texts = ["", "a", "\x00", "naïve café", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🙂", "\ud800 lone surrogate", "tab\tand\nnewline"]
    codes = texts_to_codes(texts)
    assert codes.dtype == torch.int32 and codes.shape == (len(texts), max(len(t) for t in texts))
    assert codes_to_texts(codes) == texts
    assert int(codes[2, 0]) == 1 and int(codes[0].abs().sum()) == 0  # NUL is code 1, padding 0


def test_rows_are_independent_of_their_batch() -> None:
    both = texts_to_codes(["short", "a much longer text"])
    assert codes_to_texts(both[:1]) == ["short"] and codes_to_texts(both[1:]) == ["a much longer text"]


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="^texts must hold"):
        texts_to_codes([])
    with pytest.raises(TypeError, match=r"^texts\[1\] must be a str"):
        texts_to_codes(["a", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="^codes must be a 2-D integer tensor"):
        codes_to_texts(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="^codes must hold code points"):
        codes_to_texts(torch.tensor([[-1]]))
