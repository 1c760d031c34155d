"""Text identity as the model sees it: :func:`text_keys`, the token ids of each text after the tokenizer.

Two texts are the same to a text encoder when its tokenizer turns them into the same token ids: its own
normalisation (BERT's lower-casing, accent stripping, white space) and the truncation to
``max_seq_length`` tokens included. Those ids are the exact key of a text for keeping duplicates
out of each other's negatives (:mod:`contrastlab.data.text.conflict_free`); :func:`row_keys` gives each
row of a pairs file its keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["text_keys", "row_keys"]

Key = tuple[int, ...]


def text_keys(folder: str, max_seq_length: int, texts: Sequence[str]) -> list[Key]:
    """The token ids (special tokens included, truncated to ``max_seq_length``) of each text.

    Each text is stripped first, as sentence-transformers' input module does before tokenising.

    Raises:
        ValueError: no tokenizer loads from ``folder``.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"no tokenizer loads from {folder}: {e}") from None
    ids = tokenizer([t.strip() for t in texts], truncation=True, max_length=max_seq_length)["input_ids"]
    return [tuple(int(t) for t in row) for row in ids]


def row_keys(rows: Sequence[Sequence[str]], keys_of: Callable[[list[str]], list[Key]]) -> tuple[list[Key], list[Key]]:
    """(own, protected) keys of each row for :mod:`contrastlab.data.text.conflict_free`.

    A row's own keys are the ids of its texts (one id per distinct key ``keys_of`` gives, e.g. the token
    ids of :func:`text_keys`); its protected keys are the positives of every row with the same anchor
    (the query's relevant documents, the row's own positive among them).
    """
    distinct = sorted({t for r in rows for t in r})
    key_of = dict(zip(distinct, keys_of(distinct), strict=True))
    ids: dict[Key, int] = {}
    own = [tuple(ids.setdefault(key_of[t], len(ids)) for t in r) for r in rows]
    group: dict[int, list[int]] = {}
    for r in own:
        group.setdefault(r[0], []).append(r[1])
    protected = [tuple(group[r[0]]) for r in own]
    return own, protected
