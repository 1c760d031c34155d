"""benchmarks/onnx_speed.py runs end to end on a tiny model and writes its figures (smoke test, no timing claim)."""

import subprocess
import sys
from pathlib import Path

import pytest

from contrastlab.io import read_json_verified
from tests.models.text_models import write_tiny_bert

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_smoke(tmp_path: Path) -> None:
    folder = write_tiny_bert(tmp_path / "st", "st")
    args = ["--model", str(folder), "--texts", "32", "--batch", "8", "--repeats", "1", "--max-seq-length", "16"]
    out = tmp_path / "onnx_speed.json"
    script = ROOT / "benchmarks" / "onnx_speed.py"
    subprocess.run([sys.executable, str(script), *args, "--int8", "--json", str(out)], check=True, cwd=ROOT)
    results = read_json_verified(out)["results"]
    assert set(results) == {"pytorch", "onnxruntime", "onnxruntime-int8"}
    assert results["pytorch"]["throughput_ratio"] == 1.0
    assert results["onnxruntime"]["max_abs_diff"] <= 1e-5 and results["onnxruntime"]["min_cosine"] >= 1 - 1e-6
    assert all(r["texts_per_s"] > 0 for r in results.values())
