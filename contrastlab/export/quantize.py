"""int8 dynamic quantization of an export folder: onnxruntime's ``quantize_dynamic`` on ``model.onnx``.

Dynamic quantization (onnxruntime.quantization, ``QuantType.QInt8`` weights) stores the weights of the
MatMul / Gemm nodes and of a text export's fused ``Attention`` and ``EmbedLayerNormalization``
(:mod:`contrastlab.export.optimize`) as 8-bit integers and quantizes their activations on the fly, one
scale per tensor and batch; the rest of the graph stays float32. The weights get one scale per output
channel (``per_channel=True``: a column of a MatMul's weight, an embedding row's dimension): with one
scale per tensor, the few large columns of a transformer's weight matrices set the step for every other
column, and on all-MiniLM-L6-v2 the mean cosine of the int8 embeddings to the float32 ones falls from
0.994 to 0.958 (docs/onnx.md). The result is another export folder (the tokenizer copied, a new
``onnx.json`` marking ``"quantization": "int8-dynamic"`` and ``"per_channel": true``), loaded by
:func:`~contrastlab.export.runtime.load_onnx` and audited like any model, so that what the 8-bit weights
cost in retrieval is measured (``contrastlab audit OUT``), not assumed.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from contrastlab.export.layout import MODEL_FILE
from contrastlab.export.onnx import _building, _write_meta
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
        import onnx
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
            quantize_dynamic(
                str(root / MODEL_FILE),
                str(tmp / MODEL_FILE),
                weight_type=QuantType.QInt8,
                per_channel=True,
                # outputs of the fused contrib operators have no type from ONNX shape inference: float32
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            root_logger.setLevel(level)
        for stray in tmp.glob("*-opt.onnx"):  # the quantizer's pre-processed copy, when it leaves one
            stray.unlink()
        kept = {k: v for k, v in meta.items() if k not in ("files", "format", "format_version", "contrastlab_sha256")}
        description = f"{meta.get('description', root)}, int8 dynamic quantization (per-channel weights)"
        _write_meta(
            tmp,
            {
                **kept,
                "description": description,
                "quantization": "int8-dynamic",
                "per_channel": True,
                "source": str(root),
            },
        )
        from contrastlab.export.runtime import load_onnx

        load_onnx(tmp)  # onnxruntime parses what was written
    return out
