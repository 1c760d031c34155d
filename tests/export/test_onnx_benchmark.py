"""benchmarks/onnx_speed.py runs end to end on a tiny model and writes its figures (smoke test, no timing claim)."""

import subprocess
import sys
from pathlib import Path

import pytest

from contrastlab.io import read_json_verified
from tests.models.text_models import write_tiny_bert

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "onnx_speed.py"
TINY = ["--texts", "32", "--batch", "8", "--max-seq-length", "16"]


def _run(folder: Path, out: Path, *args: str) -> str:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(folder), *TINY, *args, "--json", str(out)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return run.stdout


def test_benchmark_smoke(tmp_path: Path) -> None:
    folder = write_tiny_bert(tmp_path / "st", "st")
    out = tmp_path / "onnx_speed.json"
    stdout = _run(folder, out, "--repeats", "1", "--attention", "sdpa", "--int8", "--fidelity", "6")
    figures = read_json_verified(out)
    results = figures["results"]
    assert set(results) == {"pytorch-sdpa", "onnxruntime", "onnxruntime-int8"}
    assert results["pytorch-sdpa"]["throughput_ratio"] == 1.0
    assert results["onnxruntime"]["max_abs_diff"] <= 1e-5 and results["onnxruntime"]["min_cosine"] >= 1 - 1e-6
    assert all(r["texts_per_s"] > 0 for r in results.values())
    fidelity = figures["int8_fidelity"]
    assert fidelity["texts"] == 6 and -1.0 <= fidelity["min_cosine"] <= fidelity["mean_cosine"] <= 1.0 + 1e-9
    # what a reader needs to judge a ratio: the CPU, the load, the threads, and that the batches were shared
    for needle in ("# CPU: ", "# load average", "# torch threads: 2 intra-op", "length-sorted batches", "SUMMARY"):
        assert needle in stdout, needle
    assert len(figures["load_average"]["before"]) == 3 and figures["cpu"]["model"]


def test_benchmark_pins_and_reports_what_the_ratios_depend_on(tmp_path: Path) -> None:
    """Both PyTorch baselines run the attention they are named for; threads, sessions, order and rounds are recorded."""
    folder = write_tiny_bert(tmp_path / "st", "st")
    out = tmp_path / "onnx_speed.json"
    stdout = _run(folder, out, "--repeats", "2", "--warmup", "1", "--threads", "1", "--attention", "both", "--int8")
    figures = read_json_verified(out)
    settings = figures["settings"]
    # read back from each loaded model's config, not the option echoed
    assert settings["pytorch_attention"] == {"pytorch-sdpa": "sdpa", "pytorch-eager": "eager"}
    assert "# pytorch attention: pytorch-sdpa runs sdpa, pytorch-eager runs eager" in stdout
    assert settings["torch"]["intra_op_threads"] == 1 and settings["torch"]["OMP_NUM_THREADS"] == "1"
    assert set(settings["onnxruntime"]) == {"onnxruntime", "onnxruntime-int8"}
    for session in settings["onnxruntime"].values():  # read back from the sessions
        assert session["intra_op_threads"] == 1 and session["inter_op_threads"] == 1
        assert session["providers"] == ["CPUExecutionProvider"]
        assert session["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert settings["warmup_rounds"] == 1
    names = ["pytorch-sdpa", "pytorch-eager", "onnxruntime", "onnxruntime-int8"]
    assert figures["orders"] == [names, names[::-1]]  # every runtime once per round, reversed every other round
    assert len(figures["load_average"]["rounds"]) == 2
    for name, r in figures["results"].items():
        assert len(r["wall_s"]) == 2 and len(r["cpu_s"]) == 2, name
        assert set(r["ratio"]) == {"pytorch-sdpa", "pytorch-eager"}, name
        for ratio in r["ratio"].values():  # the range of the per-round ratios around their median
            assert ratio["min"] <= ratio["median"] <= ratio["max"]
    # each baseline against itself is exactly 1 in every round
    assert figures["results"]["pytorch-eager"]["ratio"]["pytorch-eager"] == {"median": 1.0, "min": 1.0, "max": 1.0}
