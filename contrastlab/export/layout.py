"""The layout of an ONNX export folder: file names, format tag, opset and graph inputs/outputs.

Shared by the writer (:mod:`contrastlab.export.onnx`) and the reader (:mod:`contrastlab.export.runtime`).
"""

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MODEL_FILE",
    "META_FILE",
    "TOKENIZER_DIR",
    "OPSET",
    "OUTPUTS",
    "TEXT_INPUTS",
]

FORMAT_NAME = "contrastlab-onnx"
"""The ``format`` member of ``onnx.json``."""
FORMAT_VERSION = 1
"""The ``version`` member of ``onnx.json``; a reader refuses any other."""
MODEL_FILE = "model.onnx"
META_FILE = "onnx.json"
"""The checksummed sidecar listing every file of the folder with its size and SHA-256."""
TOKENIZER_DIR = "tokenizer"
OPSET = 17
"""ONNX opset of the exported graphs (LayerNormalization, used by every transformer here, is opset 17)."""
OUTPUTS = ("embedding", "raw_embedding")
"""The graph's outputs: the served embedding, and the embedding before the final L2 normalisation."""
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""The tokenizer outputs a text graph may take, in this order (those the tokenizer gives)."""
