"""Transformer graph fusion of a text export: onnxruntime's transformer optimizer on ``model.onnx``.

A traced BERT-family encoder is a few hundred small operations per layer. onnxruntime's transformer
optimizer (``onnxruntime.transformers.optimizer.optimize_model``, model type ``bert``) rewrites the
subgraphs it recognises into its fused CPU kernels:

* ``EmbedLayerNormalization`` — word + position + token-type embeddings and their LayerNorm, which also
  turns the attention mask into per-row lengths for the attention kernels;
* ``Attention`` — the Q, K, V projections as one GEMM, the scaled dot products, the masked softmax and the
  weighted sum, per layer;
* ``SkipLayerNormalization`` — a residual addition and the LayerNorm after it;
* ``BiasGelu`` — the feed-forward bias and the exact (erf) GELU.

The attention fusion matches the *eager* attention of Hugging Face ``transformers``
(``MatMul → Div → Add(mask) → Softmax → MatMul``); the default ``sdpa`` implementation traces into
``scaled_dot_product_attention``'s decomposition, whose mask handling (``IsNaN`` / ``Where`` guards for
rows that are all padding) the pattern does not match, so no ``Attention`` is fused. The exporter
therefore traces text models with eager attention (:func:`eager_attention`); both implementations compute
the same function. The rewritten graph is then checked against PyTorch like any export
(:mod:`contrastlab.export.onnx`), and onnxruntime applies its own full graph optimisation
(``ORT_ENABLE_ALL``) when the session is created (:mod:`contrastlab.export.runtime`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

__all__ = ["FUSED_OPS", "eager_attention", "fuse_transformer"]

FUSED_OPS = ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu")
"""The fused operators counted in ``onnx.json`` (``"fused"``): how many of each the optimizer made."""


@contextlib.contextmanager
def eager_attention(module: nn.Module) -> Iterator[bool]:
    """Run the body with the Hugging Face model inside ``module`` on eager attention, restored afterwards.

    Yields:
        Whether a Hugging Face model was found and set to eager attention.
    """
    model: Any = getattr(module, "auto_model", None)
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before is None or before == "eager" or not callable(getattr(model, "set_attn_implementation", None)):
        yield before == "eager"
        return
    model.set_attn_implementation("eager")
    try:
        yield True
    finally:
        model.set_attn_implementation(before)


def fuse_transformer(path: Path, *, num_heads: int, hidden_size: int) -> dict[str, int]:
    """Rewrite the BERT-family graph at ``path`` in place with onnxruntime's fused transformer operators.

    Args:
        path: the ``model.onnx`` to rewrite.
        num_heads: attention heads per layer (the Hugging Face config's ``num_attention_heads``); 0 lets
            the optimizer read it from the graph.
        hidden_size: the model width (``hidden_size``); 0 lets the optimizer read it from the graph.

    Returns:
        How many operators of each of :data:`FUSED_OPS` the rewritten graph holds.

    Raises:
        ValueError: onnxruntime's transformer optimizer is missing (naming ``onnx``).
    """
    try:
        from onnxruntime.transformers import optimizer
    except ImportError:
        raise ValueError("onnx: graph fusion needs the onnx extra (pip install 'contrastlab[onnx]')") from None
    quiet = [logging.getLogger(name) for name in ("onnxruntime.transformers", "fusion", "")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.ERROR)  # the optimizer logs every fusion it tries
    try:
        # opt_level=1: onnxruntime's basic, hardware-independent rewrites (constant folding, redundant
        # node removal) before the Python fusions; the hardware-specific levels run at session creation
        model = optimizer.optimize_model(
            str(path), model_type="bert", num_heads=num_heads, hidden_size=hidden_size, opt_level=1
        )
    finally:
        for log, level in zip(quiet, levels, strict=True):
            log.setLevel(level)
    model.save_model_to_file(str(path))
    ops = [node.op_type for node in model.model.graph.node]
    return {name: ops.count(name) for name in FUSED_OPS}
