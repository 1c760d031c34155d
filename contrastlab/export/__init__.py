"""Serving without PyTorch: encoders exported to ONNX and run by onnxruntime.

:func:`~contrastlab.export.onnx.export_text_onnx` and :func:`~contrastlab.export.onnx.export_tensor_onnx`
write an export folder (``model.onnx``, the tokenizer of a text model, and the checksummed ``onnx.json``);
:func:`~contrastlab.export.runtime.load_onnx` verifies and loads one as an onnxruntime encoder.
``contrastlab export MODEL --onnx OUT`` is the command line (:func:`~contrastlab.export.onnx.export_model`).
"""

from contrastlab.export.onnx import export_model, export_tensor_onnx, export_text_onnx
from contrastlab.export.quantize import quantize_int8
from contrastlab.export.runtime import OnnxTensorEncoder, OnnxTextEncoder, is_export_folder, load_onnx, read_export

__all__ = [
    "OnnxTensorEncoder",
    "OnnxTextEncoder",
    "export_model",
    "export_tensor_onnx",
    "export_text_onnx",
    "is_export_folder",
    "load_onnx",
    "quantize_int8",
    "read_export",
]
