"""Encode throughput of the ONNX export under onnxruntime against PyTorch, as ratios measured in one process.

The bundled all-MiniLM-L6-v2 (or ``--model FOLDER``) is exported (``contrastlab export``, checked against
PyTorch) and, with ``--int8``, quantized (int8 dynamic); then the same texts are encoded by each runtime
through the audit's own path (:func:`contrastlab.audit.inputs.encode_texts`: batches of ``--batch``
texts sorted by length, the model up to its final ``Normalize``), with the same number of threads. The
runtimes alternate (A B C A B C …) and the median of each round's ratio is reported, so load from other
processes hits all alike. Texts are docstring summaries and signatures of the code corpus.

Also printed: the largest difference of the float32 export's embeddings from PyTorch's (normalised), and
the smallest cosine of the int8 export's to PyTorch's. What the int8 weights cost in retrieval is for
``contrastlab audit INT8_FOLDER`` to say (``contrastlab export minilm --onnx OUT --int8 OUT8``).

Usage::

    python benchmarks/onnx_speed.py                      # MiniLM, batch 64, 1,024 texts, 5 rounds
    python benchmarks/onnx_speed.py --int8 --threads 2
    python benchmarks/onnx_speed.py --texts 64 --repeats 1 --max-seq-length 32   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_THREADS, interleaved_medians, machine, median, paired_ratio, set_threads  # noqa: E402


def _texts(n: int) -> list[str]:
    """``n`` texts of the code corpus: docstring summaries and signatures alternately (varied lengths)."""
    from contrastlab.data.code_corpus import build_code_corpus

    pairs = build_code_corpus().pairs
    texts = [t for p in pairs for t in (p.query, p.positive)]
    if len(texts) < n:
        raise SystemExit(f"--texts: the code corpus has {len(texts)} texts, fewer than {n}")
    return texts[:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", help="minilm or a sentence-transformers folder")
    ap.add_argument("--batch", type=int, default=64, help="texts per batch (both runtimes)")
    ap.add_argument("--texts", type=int, default=1024, help="texts encoded per timed call")
    ap.add_argument("--max-seq-length", type=int, default=128, help="tokens per text")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up round)")
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="intra-op threads of both runtimes")
    ap.add_argument("--int8", action="store_true", help="also time the int8 dynamically quantized export")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    set_threads(args.threads)

    import numpy as np
    import torch

    from contrastlab.audit import AuditConfig
    from contrastlab.audit.inputs import encode_texts, load_model
    from contrastlab.export import export_model, load_onnx, quantize_int8

    texts = _texts(args.texts)
    pytorch = load_model(AuditConfig(model=args.model, max_seq_length=args.max_seq_length))
    encoders: dict[str, object] = {"pytorch": pytorch}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = export_model(args.model, Path(tmp) / "fp32", max_seq_length=args.max_seq_length)
        encoders["onnxruntime"] = load_onnx(fp32, threads=args.threads)
        if args.int8:
            encoders["onnxruntime-int8"] = load_onnx(quantize_int8(fp32, Path(tmp) / "int8"), threads=args.threads)

        def run(name: str):  # noqa: ANN202 — a (N, D) tensor
            return encode_texts(encoders[name], texts, batch_size=args.batch, progress=False, label=name)  # type: ignore[arg-type]

        unit = {name: torch.nn.functional.normalize(run(name), dim=1).numpy() for name in encoders}
        times = interleaved_medians({name: (lambda n=name: run(n)) for name in encoders}, args.repeats)

    print(f"# ONNX encode throughput: {args.model}, batch {args.batch}, {len(texts)} texts, "
          f"{args.max_seq_length} tokens, {args.repeats} rounds")  # fmt: skip
    print(f"# {machine()}; onnxruntime {args.threads} intra-op threads")
    print(f"{'runtime':<18} {'texts/s':>10} {'x pytorch':>10} {'vs pytorch':>22}")
    results: dict[str, dict[str, float]] = {}
    for name, ts in times.items():
        rate = len(texts) / median(ts)
        ratio = 1.0 / paired_ratio(times, name, "pytorch")  # throughput ratio = inverse time ratio
        cos = float((unit[name] * unit["pytorch"]).sum(1).min())
        err = float(np.abs(unit[name] - unit["pytorch"]).max())
        results[name] = {"texts_per_s": rate, "throughput_ratio": ratio, "min_cosine": cos, "max_abs_diff": err}
        print(f"{name:<18} {rate:>10.1f} {ratio:>10.3f} {f'max |Δ| {err:.1e}, cos ≥ {cos:.6f}':>22}")
    if args.json:
        from contrastlab.io import write_json_atomic

        write_json_atomic(args.json, {"args": vars(args), "machine": machine(), "results": results})
    print(json.dumps({k: round(v["throughput_ratio"], 3) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
