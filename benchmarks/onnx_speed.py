"""Encode throughput of the ONNX export under onnxruntime against PyTorch, as ratios measured in one process.

The bundled all-MiniLM-L6-v2 (or ``--model FOLDER``) is exported (``contrastlab export``: traced with eager
attention, fused by onnxruntime's transformer optimizer, checked against PyTorch) and, with ``--int8``,
quantized (int8 dynamic, per-channel weights); then the same texts are encoded by each runtime through the
audit's own path (:func:`contrastlab.audit.inputs.encode_texts`): the SAME batches of ``--batch`` texts,
sorted by length, for every runtime, tokenisation included, the model up to its final ``Normalize``, with
the same number of intra-op threads. The runtimes alternate (A B C A B C …) and the median of each round's
ratio is reported, so load from other processes hits all alike. Texts are docstring summaries and
signatures of the code corpus.

Printed with the figures: the CPU model (``/proc/cpuinfo``), the load average before and after, and the
thread settings of both runtimes; the largest difference of the float32 export's embeddings from PyTorch's
(normalised) and the smallest cosine of the int8 export's to PyTorch's; with ``--fidelity N``, the mean and
smallest cosine of the int8 export's embeddings to the float32 export's on N standard-library docstring
paragraphs that the code corpus never uses (:func:`contrastlab.export.fidelity.docstring_paragraphs`).
What the int8 weights cost in retrieval is for ``contrastlab audit INT8_FOLDER`` to say
(``contrastlab export minilm --onnx OUT --int8 OUT8``).

Usage::

    python benchmarks/onnx_speed.py                      # MiniLM, batch 64, 1,024 texts, 5 rounds
    python benchmarks/onnx_speed.py --texts 512 --repeats 3 --int8 --threads 2
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


def _cpu_model() -> str:
    """The ``model name`` of ``/proc/cpuinfo`` (what the figures were measured on), or ``unknown CPU``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _load(avg: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in avg)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", help="minilm or a sentence-transformers folder")
    ap.add_argument("--batch", type=int, default=64, help="texts per batch (both runtimes)")
    ap.add_argument("--texts", type=int, default=1024, help="texts encoded per timed call")
    ap.add_argument("--max-seq-length", type=int, default=128, help="tokens per text")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up round)")
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="intra-op threads of both runtimes")
    ap.add_argument("--int8", action="store_true", help="also time the int8 dynamically quantized export")
    ap.add_argument(
        "--fidelity", type=int, default=0, help="with --int8: cosine to float32 on this many unseen paragraphs"
    )
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    if args.fidelity and not args.int8:
        ap.error("--fidelity: needs --int8 (it compares the int8 export with the float32 one)")
    set_threads(args.threads)
    load_before = os.getloadavg()

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
        load_after = os.getloadavg()
        fidelity: dict[str, float] = {}
        if args.fidelity:
            from contrastlab.export.fidelity import docstring_paragraphs, export_cosines

            cos = export_cosines(
                encoders["onnxruntime"], encoders["onnxruntime-int8"], docstring_paragraphs(args.fidelity)
            )  # type: ignore[arg-type]
            fidelity = {"texts": len(cos), "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}

    print(f"# ONNX encode throughput: {args.model}, batch {args.batch}, {len(texts)} texts, "
          f"{args.max_seq_length} tokens, {args.repeats} rounds")  # fmt: skip
    import onnxruntime

    print(f"# CPU: {_cpu_model()}, {os.cpu_count()} logical cores; torch {torch.__version__}, "
          f"onnxruntime {onnxruntime.__version__}")  # fmt: skip
    print(f"# threads: torch {torch.get_num_threads()} intra-op, onnxruntime {args.threads} intra-op and 1 inter-op, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")  # fmt: skip
    print(f"# load average (1, 5, 15 min): {_load(load_before)} before, {_load(load_after)} after")
    fp32_meta = encoders["onnxruntime"].meta  # type: ignore[attr-defined]
    print(f"# float32 export: fused {fp32_meta.get('fused')}")
    print(f"# batches: the same {-(-len(texts) // args.batch)} length-sorted batches of {args.batch} for every runtime")
    print(f"{'runtime':<18} {'texts/s':>10} {'x pytorch':>10} {'vs pytorch':>22}")
    results: dict[str, dict[str, float]] = {}
    for name, ts in times.items():
        rate = len(texts) / median(ts)
        ratio = 1.0 / paired_ratio(times, name, "pytorch")  # throughput ratio = inverse time ratio
        cos = float((unit[name] * unit["pytorch"]).sum(1).min())
        err = float(np.abs(unit[name] - unit["pytorch"]).max())
        results[name] = {"texts_per_s": rate, "throughput_ratio": ratio, "min_cosine": cos, "max_abs_diff": err}
        print(f"{name:<18} {rate:>10.1f} {ratio:>10.3f} {f'max |Δ| {err:.1e}, cos ≥ {cos:.6f}':>22}")
    if fidelity:
        print(f"int8 vs float32 export on {fidelity['texts']} unseen docstring paragraphs: mean cosine "
              f"{fidelity['mean_cosine']:.4f}, min {fidelity['min_cosine']:.4f}")  # fmt: skip
    if args.json:
        from contrastlab.io import write_json_atomic

        write_json_atomic(
            args.json,
            {
                "args": vars(args),
                "machine": machine(),
                "cpu": _cpu_model(),
                "load_average": {"before": list(load_before), "after": list(load_after)},
                "results": results,
                "int8_fidelity": fidelity,
            },
        )
    print(json.dumps({k: round(v["throughput_ratio"], 3) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
