"""int8 dynamic quantization of an export: a verified folder whose embeddings stay close to float32's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contrastlab.cli import main  # noqa: E402
from contrastlab.export import OnnxTextEncoder, load_onnx, quantize_int8, read_export  # noqa: E402
from tests.models.text_models import write_tiny_bert  # noqa: E402

TEXTS = ["x", "Return the square root of x.", "open a file and return a stream " * 4]


def test_int8_copy_is_an_export_close_to_float32(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_tiny_bert(tmp_path / "st", "st")
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    assert main(["export", str(folder), "--onnx", str(fp32), "--int8", str(int8)]) == 0
    assert "int8 dynamic quantization" in capsys.readouterr().out
    meta, model_bytes = read_export(int8)
    assert meta["quantization"] == "int8-dynamic" and meta["dim"] == 16 and meta["source"] == str(fp32)
    assert len(model_bytes) < 0.5 * (fp32 / "model.onnx").stat().st_size  # 8-bit weights
    a, b = load_onnx(fp32), load_onnx(int8)
    assert isinstance(a, OnnxTextEncoder) and isinstance(b, OnnxTextEncoder)
    x, y = a.encode(TEXTS), b.encode(TEXTS)
    # 8-bit weights with one scale per tensor perturb each unit-norm embedding by a few percent at most;
    # a broken graph (wrong scales, a dropped node) gives unrelated embeddings (cosine near 0)
    assert float((x * y).sum(1).min()) > 0.99 and not np.array_equal(x, y)
    with pytest.raises(ValueError, match="^model: .* is quantized already"):
        quantize_int8(int8, tmp_path / "again")
    assert main(["export", str(folder), "--onnx", str(tmp_path / "new"), "--int8", str(int8)]) == 2
    assert "int8: " in capsys.readouterr().err and not (tmp_path / "new").exists()
