"""int8 dynamic quantization of an export folder: onnxruntime's ``quantize_dynamic`` on ``model.onnx``.

Dynamic quantization (onnxruntime.quantization, ``QuantType.QInt8`` weights) stores the weights of the
MatMul and Gemm nodes as 8-bit integers with one scale per tensor and quantizes their activations on the
fly; the rest of the graph stays float32. The result is another export folder (the tokenizer copied, a new
``onnx.json`` marking ``"quantization": "int8-dynamic"``), loaded by
:func:`~contrastlab.export.runtime.load_onnx` and audited like any model, so that what the 8-bit weights
cost in retrieval is measured (``contrastlab audit OUT``), not assumed.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from contrastlab.export.onnx import MODEL_FILE, _building, _write_meta
from contrastlab.export.runtime import read_export

__all__ = ["quantize_int8"]


def quantize_int8(src: str | Path, out: str | Path) -> Path:
    """Write the int8 dynamically quantized copy of the export folder ``src`` to ``out``.

    Raises:
        ValueError: ``src`` is not an export folder, or is quantized already (naming ``model``); ``out``
            exists (naming ``onnx``); onnxruntime's quantizer is missing.
        contrastlab.io.CorruptFileError: a file of ``src`` fails its check.
    """
    root = Path(src).expanduser()
    meta, _ = read_export(root)  # every file verified before it is read
    if meta.get("quantization"):
        raise ValueError(f"model: {root} is quantized already ({meta['quantization']})")
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ValueError("onnx: quantization needs the onnx extra (pip install 'contrastlab[onnx]')") from None
    out = Path(out)
    with _building(out) as tmp:
        for name in meta["files"]:
            if name != MODEL_FILE:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / name, tmp / name)
        root_logger = logging.getLogger()
        level = root_logger.level
        root_logger.setLevel(logging.ERROR)  # the quantizer's advice to pre-process, logged on every call
        try:
            quantize_dynamic(str(root / MODEL_FILE), str(tmp / MODEL_FILE), weight_type=QuantType.QInt8)
        finally:
            root_logger.setLevel(level)
        for stray in tmp.glob("*-opt.onnx"):  # the quantizer's pre-processed copy, when it leaves one
            stray.unlink()
        kept = {k: v for k, v in meta.items() if k not in ("files", "format", "format_version", "contrastlab_sha256")}
        description = f"{meta.get('description', root)}, int8 dynamic quantization"
        _write_meta(tmp, {**kept, "description": description, "quantization": "int8-dynamic", "source": str(root)})
        from contrastlab.export.runtime import load_onnx

        load_onnx(tmp)  # onnxruntime parses what was written
    return out
