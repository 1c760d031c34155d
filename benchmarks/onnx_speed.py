"""Encode throughput of the ONNX export under onnxruntime against PyTorch, as ratios measured in one process.

The bundled all-MiniLM-L6-v2 (or ``--model FOLDER``) is exported (``contrastlab export``: traced with eager
attention, fused by onnxruntime's transformer optimizer, checked against PyTorch) and, with ``--int8``,
quantized (int8 dynamic, per-channel weights); then the same texts are encoded by each runtime through the
audit's own path (:func:`contrastlab.audit.inputs.encode_texts`): the SAME batches of ``--batch`` texts,
sorted by length, for every runtime, tokenisation included, the model up to its final ``Normalize``, with
the same number of intra-op threads. Texts are docstring summaries and signatures of the code corpus.

Every choice a ratio depends on is pinned and printed:

* the PyTorch baseline's attention implementation (``--attention``): ``sdpa``, what ``transformers`` loads
  BERT with and what the audit runs, or ``eager``, the matmul-softmax-matmul form the export is traced
  from; ``both`` times both baselines, and the ratios are given against each. It is set on the loaded
  model and read back from its config (:func:`pin_attention`), not assumed;
* the threads: torch's intra- and inter-op threads, ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY``, and every
  onnxruntime session's intra- and inter-op threads, execution mode, graph optimisation level, spinning
  and providers, read back from the session (:func:`ort_settings`);
* warm-up (``--warmup`` untimed rounds after the accuracy pass) and the order of the runtimes: each round
  times every runtime once, back to back, the order reversed every other round (A B C, C B A, …) so that
  no runtime always runs first or after the same neighbour;
* the clocks: wall time and the process's CPU time of every call, with the load average at every round.

Reported per runtime: its time in every round, the median throughput, and the ratio to each PyTorch
baseline as the median of the per-round ratios with their smallest and largest (a ratio is taken within
a round, so load from other processes hits both runtimes alike). Printed with the figures: the CPU model
(``lscpu``) and the instruction-set extensions the int8 and float kernels choose by, the load average,
the versions of torch, transformers, sentence-transformers, onnx and onnxruntime; the largest
difference of the float32 export's embeddings from PyTorch's (normalised) and the smallest cosine of the
int8 export's to PyTorch's; with ``--fidelity N``, the mean and smallest cosine of the int8 export's
embeddings to the float32 export's on N standard-library docstring paragraphs that the code corpus never
uses (:func:`contrastlab.export.fidelity.docstring_paragraphs`). The last line is a one-line JSON summary.

Usage::

    python benchmarks/onnx_speed.py                      # MiniLM, batch 64, 1,024 texts, 5 rounds
    python benchmarks/onnx_speed.py --texts 512 --repeats 5 --int8 --threads 2
    python benchmarks/onnx_speed.py --texts 64 --repeats 1 --max-seq-length 32   # a smoke run
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_THREADS, set_threads  # noqa: E402

#: The attention implementations the PyTorch baseline can be pinned to (``--attention``).
ATTENTIONS = ("sdpa", "eager")
#: Instruction-set extensions (``/proc/cpuinfo`` flags) that onnxruntime's and torch's kernels choose by:
#: int8 GEMMs are far faster with VNNI or AMX, float32 ones with AVX-512.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def _texts(n: int) -> list[str]:
    """``n`` texts of the code corpus: docstring summaries and signatures alternately (varied lengths)."""
    from contrastlab.data.text.code_corpus import build_code_corpus

    pairs = build_code_corpus().pairs
    texts = [t for p in pairs for t in (p.query, p.positive)]
    if len(texts) < n:
        raise SystemExit(f"--texts: the code corpus has {len(texts)} texts, fewer than {n}")
    return texts[:n]


def cpu_description() -> dict[str, Any]:
    """The CPU the figures were measured on: ``lscpu``'s vendor and model, logical cores, ISA flags."""
    info: dict[str, Any] = {"vendor": "unknown", "model": "unknown CPU", "logical_cores": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Vendor ID":
                info["vendor"] = value.strip()
            elif key.strip() == "Model name":
                info["model"] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    info["isa"] = [f for f in ISA_FLAGS if f in flags]
    return info


def versions() -> dict[str, str]:
    """Versions of the packages the timed code runs in."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "sentence-transformers", "onnx", "onnxruntime", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def pin_attention(encoder: Any, attention: str) -> str:
    """Set the attention implementation of the Hugging Face model inside a PyTorch text encoder; return it.

    Args:
        encoder: an audit text encoder (:class:`contrastlab.audit.inputs.TextEncoder`).
        attention: one of :data:`ATTENTIONS`.

    Returns:
        The implementation the model's config holds afterwards (read back, so a model that ignored the
        request would be reported as it runs).

    Raises:
        ValueError: ``attention`` is not one of :data:`ATTENTIONS`; the encoder holds no Hugging Face model
            whose attention can be set.
    """
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    model = getattr(next(iter(encoder.model), None), "auto_model", None)
    if model is None or not callable(getattr(model, "set_attn_implementation", None)):
        raise ValueError(f"model: {encoder.description} holds no Hugging Face model whose attention can be set")
    model.set_attn_implementation(attention)
    return str(model.config._attn_implementation)


def torch_settings() -> dict[str, Any]:
    """torch's thread settings and the OpenMP environment, as this process runs them."""
    import torch

    return {
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
    }


def ort_settings(session: Any) -> dict[str, Any]:
    """An onnxruntime session's settings, read back from the session (threads, mode, optimisation, spinning)."""
    options = session.get_session_options()
    try:
        spinning = options.get_session_config_entry("session.intra_op.allow_spinning")
    except RuntimeError:  # not set: onnxruntime's default
        spinning = "1 (default)"
    return {
        "providers": list(session.get_providers()),
        "intra_op_threads": options.intra_op_num_threads,
        "inter_op_threads": options.inter_op_num_threads,
        "execution_mode": str(options.execution_mode).rsplit(".", 1)[-1],
        "graph_optimization_level": str(options.graph_optimization_level).rsplit(".", 1)[-1],
        "intra_op_allow_spinning": spinning,
    }


def alternated_rounds(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], list[list[str]], list[float]]:
    """Time every function once per round, the order reversed every other round, after ``warmup`` rounds.

    Returns:
        ``(wall, cpu, orders, loads)``: per function its wall-clock and process CPU seconds in every round,
        the order of each round, and the 1-minute load average after each round.
    """
    names = list(fns)
    for r in range(warmup):
        for name in names if r % 2 == 0 else names[::-1]:
            fns[name]()
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    orders: list[list[str]] = []
    loads: list[float] = []
    for r in range(repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            w0, c0 = time.perf_counter(), time.process_time()
            fns[name]()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
        orders.append(list(order))
        loads.append(os.getloadavg()[0])
    return wall, cpu, orders, loads


def round_ratios(times: dict[str, list[float]], name: str, ref: str) -> dict[str, float]:
    """Throughput of ``name`` over that of ``ref`` (``time[ref] / time[name]``) per round: median, min, max."""
    ratios = [r / t for t, r in zip(times[name], times[ref], strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def _load(avg: tuple[float, float, float] | list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in avg)


def _fmt_ratio(r: dict[str, float]) -> str:
    return f"{r['median']:.3f}x [{r['min']:.3f}, {r['max']:.3f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", help="minilm or a sentence-transformers folder")
    ap.add_argument("--batch", type=int, default=64, help="texts per batch (both runtimes)")
    ap.add_argument("--texts", type=int, default=1024, help="texts encoded per timed call")
    ap.add_argument("--max-seq-length", type=int, default=128, help="tokens per text")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds before them (after one accuracy pass)")
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="intra-op threads of both runtimes")
    ap.add_argument(
        "--attention",
        choices=(*ATTENTIONS, "both"),
        default="both",
        help="the PyTorch baseline's attention implementation (both: time the two, ratios against each)",
    )
    ap.add_argument("--int8", action="store_true", help="also time the int8 dynamically quantized export")
    ap.add_argument(
        "--fidelity", type=int, default=0, help="with --int8: cosine to float32 on this many unseen paragraphs"
    )
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    if args.fidelity and not args.int8:
        ap.error("--fidelity: needs --int8 (it compares the int8 export with the float32 one)")
    for flag in ("batch", "texts", "max_seq_length", "repeats", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')}: must be at least 1, got {getattr(args, flag)}")
    if args.warmup < 0:
        ap.error(f"--warmup: must be at least 0, got {args.warmup}")
    set_threads(args.threads)
    load_before = os.getloadavg()

    import numpy as np
    import torch

    from contrastlab.audit import AuditConfig
    from contrastlab.audit.inputs import encode_texts, load_model
    from contrastlab.export import export_model, load_onnx, quantize_int8

    texts = _texts(args.texts)
    attentions = ATTENTIONS if args.attention == "both" else (args.attention,)
    encoders: dict[str, Any] = {}
    attention_in_use: dict[str, str] = {}
    for attention in attentions:
        name = f"pytorch-{attention}"
        encoders[name] = load_model(AuditConfig(model=args.model, max_seq_length=args.max_seq_length))
        attention_in_use[name] = pin_attention(encoders[name], attention)
    baselines = list(encoders)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = export_model(args.model, Path(tmp) / "fp32", max_seq_length=args.max_seq_length)
        encoders["onnxruntime"] = load_onnx(fp32, threads=args.threads)
        if args.int8:
            encoders["onnxruntime-int8"] = load_onnx(quantize_int8(fp32, Path(tmp) / "int8"), threads=args.threads)

        def run(name: str) -> torch.Tensor:
            return encode_texts(encoders[name], texts, batch_size=args.batch, progress=False, label=name)

        # the accuracy pass: every runtime encodes the texts once before the warm-up
        unit = {name: torch.nn.functional.normalize(run(name), dim=1).numpy() for name in encoders}
        wall, cpu, orders, round_loads = alternated_rounds(
            {name: functools.partial(run, name) for name in encoders}, args.repeats, args.warmup
        )
        load_after = os.getloadavg()
        fidelity: dict[str, float] = {}
        if args.fidelity:
            from contrastlab.export.fidelity import docstring_paragraphs, export_cosines

            cos = export_cosines(
                encoders["onnxruntime"], encoders["onnxruntime-int8"], docstring_paragraphs(args.fidelity)
            )  # type: ignore[arg-type]
            fidelity = {"texts": len(cos), "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}

    cpu_info = cpu_description()
    settings = {
        "pytorch_attention": attention_in_use,
        "torch": torch_settings(),
        "onnxruntime": {
            name: ort_settings(enc.session) for name, enc in encoders.items() if name.startswith("onnxruntime")
        },
        "warmup_rounds": args.warmup,
        "accuracy_pass": True,
        "order": "alternated: each round times every runtime once, reversed every other round",
        "batches": f"the same {-(-len(texts) // args.batch)} length-sorted batches of {args.batch} for every runtime",
    }
    ref = baselines[0]
    print(f"# ONNX encode throughput: {args.model}, batch {args.batch}, {len(texts)} texts, "
          f"{args.max_seq_length} tokens, {args.warmup} warm-up + {args.repeats} timed rounds")  # fmt: skip
    print(f"# CPU: {cpu_info['model']} ({cpu_info['vendor']}), {cpu_info['logical_cores']} logical cores, "
          f"ISA {' '.join(cpu_info['isa']) or 'unknown'}")  # fmt: skip
    print("# versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(f"# load average (1, 5, 15 min): {_load(load_before)} before, {_load(load_after)} after; "
          f"1-min after each round: {_load(round_loads)}")  # fmt: skip
    print("# pytorch attention: " + ", ".join(f"{k} runs {v}" for k, v in attention_in_use.items()))
    ts = settings["torch"]
    print(f"# torch threads: {ts['intra_op_threads']} intra-op, {ts['inter_op_threads']} inter-op; "
          f"OMP_NUM_THREADS={ts['OMP_NUM_THREADS']}, OMP_WAIT_POLICY={ts['OMP_WAIT_POLICY']}")  # fmt: skip
    for name, o in settings["onnxruntime"].items():
        print(f"# {name} session: {o['intra_op_threads']} intra-op, {o['inter_op_threads']} inter-op threads, "
              f"{o['execution_mode']}, {o['graph_optimization_level']}, spinning {o['intra_op_allow_spinning']}, "
              f"providers {','.join(o['providers'])}")  # fmt: skip
    fp32_meta = encoders["onnxruntime"].meta
    print(f"# float32 export: fused {fp32_meta.get('fused')}")
    print(f"# batches: {settings['batches']}; order {settings['order']}")
    for r, order in enumerate(orders):
        cells = ", ".join(f"{n} {wall[n][r]:.2f} s ({cpu[n][r]:.2f} s CPU)" for n in order)
        print(f"# round {r + 1}: {cells}; load {round_loads[r]:.2f}")
    header = "".join(f" {'x ' + b + ' [min, max]':>30}" for b in baselines)
    print(f"{'runtime':<18} {'texts/s':>9}{header} {'vs ' + ref:>30}")
    results: dict[str, dict[str, Any]] = {}
    for name in encoders:
        rate = len(texts) / statistics.median(wall[name])
        ratios = {b: round_ratios(wall, name, b) for b in baselines}
        cpu_ratios = {b: round_ratios(cpu, name, b) for b in baselines}
        min_cos = float((unit[name] * unit[ref]).sum(1).min())
        err = float(np.abs(unit[name] - unit[ref]).max())
        results[name] = {
            "texts_per_s": rate,
            "throughput_ratio": ratios[ref]["median"],
            "ratio": ratios,
            "cpu_time_ratio": cpu_ratios,
            "wall_s": wall[name],
            "cpu_s": cpu[name],
            "min_cosine": min_cos,
            "max_abs_diff": err,
        }
        cells = "".join(f" {_fmt_ratio(ratios[b]):>30}" for b in baselines)
        print(f"{name:<18} {rate:>9.1f}{cells} {f'max |Δ| {err:.1e}, cos ≥ {min_cos:.6f}':>30}")
    if fidelity:
        print(f"int8 vs float32 export on {fidelity['texts']} unseen docstring paragraphs: mean cosine "
              f"{fidelity['mean_cosine']:.4f}, min {fidelity['min_cosine']:.4f}")  # fmt: skip
    for name in encoders:
        if name not in baselines:
            against = "; ".join(
                f"{_fmt_ratio(results[name]['ratio'][b])} {b} (CPU time {_fmt_ratio(results[name]['cpu_time_ratio'][b])})"
                for b in baselines
            )
            print(
                f"SUMMARY {name}: {against}; threads {args.threads}, load {_load(load_before)} -> {_load(load_after)}"
            )
    if args.json:
        from contrastlab.io import write_json_atomic

        write_json_atomic(
            args.json,
            {
                "args": vars(args),
                "cpu": cpu_info,
                "versions": versions(),
                "settings": settings,
                "load_average": {"before": list(load_before), "after": list(load_after), "rounds": round_loads},
                "orders": orders,
                "results": results,
                "int8_fidelity": fidelity,
            },
        )
    print(json.dumps({k: round(v["throughput_ratio"], 3) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
