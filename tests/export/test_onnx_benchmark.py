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
    run = subprocess.run(
        [sys.executable, str(script), *args, "--int8", "--fidelity", "6", "--json", str(out)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    figures = read_json_verified(out)
    results = figures["results"]
    assert set(results) == {"pytorch", "onnxruntime", "onnxruntime-int8"}
    assert results["pytorch"]["throughput_ratio"] == 1.0
    assert results["onnxruntime"]["max_abs_diff"] <= 1e-5 and results["onnxruntime"]["min_cosine"] >= 1 - 1e-6
    assert all(r["texts_per_s"] > 0 for r in results.values())
    fidelity = figures["int8_fidelity"]
    assert fidelity["texts"] == 6 and -1.0 <= fidelity["min_cosine"] <= fidelity["mean_cosine"] <= 1.0 + 1e-9
    # what a reader needs to judge a ratio: the CPU, the load, the threads, and that the batches were shared
    for needle in ("# CPU: ", "# load average", "# threads: torch 2 intra-op, onnxruntime 2", "length-sorted batches"):
        assert needle in run.stdout, needle
    assert len(figures["load_average"]["before"]) == 3 and figures["cpu"]
