"""The words the norm audit embeds on their own, and what is known about each: frequency and length.

* :func:`builtin_words` — the default list: ``n`` words at evenly spaced frequency ranks among the
  50,000 most frequent alphabetic English words of ``wordfreq`` (Zipf ≈ 7.7 down to ≈ 2.5), so the list
  spans five orders of magnitude of frequency rather than only the common end;
* :func:`read_word_list` — a user's UTF-8 file of words or short texts, one per line;
* :func:`zipf_frequencies` — per text, the mean ``wordfreq`` Zipf value of its words that ``wordfreq``
  knows (Zipf = log10 of occurrences per billion words; an unknown word has Zipf 0 and is left out of
  the mean rather than counted as 0);
* :func:`token_counts` — per text, how many tokens the model's own tokenizer gives it (special tokens
  and truncation included: the tokens the model actually pools over).

Everything is read from installed packages: nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BUILTIN_VOCABULARY", "builtin_words", "read_word_list", "zipf_frequencies", "token_counts"]

BUILTIN_VOCABULARY = 50_000
"""How many of ``wordfreq``'s most frequent alphabetic English words :func:`builtin_words` draws from."""


def _wordfreq() -> Any:
    try:
        import wordfreq
    except ImportError:
        raise ValueError("words: word frequencies need wordfreq (pip install 'contrastlab[text]')") from None
    return wordfreq


def builtin_words(n: int) -> list[str]:
    """``n`` words at evenly spaced ranks among the :data:`BUILTIN_VOCABULARY` most frequent alphabetic words.

    Alphabetic means ASCII letters only and at least two of them (``wordfreq``'s list also holds
    numbers, contractions and single letters). The list is in rank order, most frequent first.

    Raises:
        ValueError: ``n`` is not an int in ``[3, BUILTIN_VOCABULARY]``; ``wordfreq`` is not installed.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 3 <= n <= BUILTIN_VOCABULARY:
        raise ValueError(f"norm_words must be an int in [3, {BUILTIN_VOCABULARY}], got {n!r}")
    wf = _wordfreq()
    vocabulary: list[str] = []
    for w in wf.iter_wordlist("en"):
        if w.isascii() and w.isalpha() and len(w) >= 2:
            vocabulary.append(w)
            if len(vocabulary) == BUILTIN_VOCABULARY:
                break
    ranks = np.round(np.linspace(0, len(vocabulary) - 1, n)).astype(np.int64)
    return [vocabulary[r] for r in ranks]


def read_word_list(path: str | Path) -> list[str]:
    """The non-empty lines of a UTF-8 file, stripped of surrounding spaces: one word or text per line.

    Raises:
        ValueError: naming the argument ``words``: a missing file, not UTF-8, an empty line, a line that
            repeats an earlier one, fewer than 3 lines.
    """
    from contrastlab.data.text.pairs import _decode, _lines

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"words: {p} is not a file")
    try:
        text = _decode(p, p.read_bytes())
    except ValueError as e:  # the decoder names its own argument
        raise ValueError(f"words: {str(e).removeprefix('path: ')}") from None
    words: list[str] = []
    first: dict[str, int] = {}
    for line, raw in enumerate(_lines(text), start=1):
        w = raw.strip()
        if not w:
            raise ValueError(f"words: {p} line {line}: empty line")
        if "\0" in w:
            raise ValueError(f"words: {p} line {line}: holds a NUL byte (a binary file?)")
        if w in first:
            raise ValueError(f"words: {p} line {line}: {w!r} repeats line {first[w]}")
        first[w] = line
        words.append(w)
    if len(words) < 3:
        raise ValueError(f"words: {p} holds {len(words)} line(s); a rank correlation needs at least 3")
    return words


def zipf_frequencies(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per text, the mean Zipf frequency of its ``wordfreq`` tokens that ``wordfreq`` knows.

    Returns:
        ``(zipf, unknown)``: ``(n,)`` float64 means (NaN for a text none of whose words is known), and
        ``(n,)`` int64 counts of the words left out as unknown.
    """
    wf = _wordfreq()
    zipf = np.full(len(texts), np.nan)
    unknown = np.zeros(len(texts), dtype=np.int64)
    for i, t in enumerate(texts):
        values = [wf.zipf_frequency(w, "en") for w in wf.tokenize(t, "en")]
        known = [v for v in values if v > 0]
        unknown[i] = len(values) - len(known)
        if known:
            zipf[i] = float(np.mean(known))
    return zipf, unknown


def token_counts(encoder: Any, texts: list[str], *, batch_size: int = 1024) -> np.ndarray:
    """``(n,)`` int64: the tokens the model pools over for each text (its attention mask's sum).

    ``encoder`` is anything with a ``tokenize(texts)`` returning an ``attention_mask`` (a
    :class:`~contrastlab.audit.inputs.TextEncoder`, an :class:`~contrastlab.export.runtime.OnnxTextEncoder`).

    Raises:
        ValueError: naming ``model``, whose tokenizer gives no attention mask.
    """
    out = np.empty(len(texts), dtype=np.int64)
    for s in range(0, len(texts), batch_size):
        features = encoder.tokenize(texts[s : s + batch_size])
        if "attention_mask" not in features:
            raise ValueError(
                f"model: {getattr(encoder, 'description', encoder)} gives no attention_mask, so its token counts "
                "(the length the norm claims hold fixed) are unknown"
            )
        out[s : s + batch_size] = np.asarray(features["attention_mask"]).sum(axis=1)
    return out
