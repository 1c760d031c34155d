"""``contrastlab export MODEL --onnx OUT | --st OUT``: a model as an ONNX folder, a text run as a sentence-transformers one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command, one_line


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab export``."""
    p = add_command(
        sub,
        "export",
        help="export a model to ONNX (--onnx) or a text run as a sentence-transformers folder (--st)",
        description="--onnx OUT: export a text model (minilm, a sentence-transformers/Hugging Face folder) or a "
        "contrastlab run's encoder (text, MLP, CNN, ResNet-18, ViT) to an ONNX folder: model.onnx (dynamic batch and "
        "sequence axes, pooling and normalisation inside), the tokenizer, and a checksummed onnx.json; the folder can "
        "be audited (contrastlab audit OUT). --st OUT: write the fine-tuned text encoder of a `contrastlab train` run "
        "as a sentence-transformers folder that SentenceTransformer(OUT) loads without contrastlab (text runs also "
        "save one in RUN/model).",
    )
    p.add_argument("model", help="minilm, a model folder, or a contrastlab run folder (--st: a text run)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--onnx", metavar="OUT", help="the ONNX export folder to write (must not exist)")
    target.add_argument("--st", metavar="OUT", help="the sentence-transformers folder to write (new or empty)")
    p.add_argument("--max-seq-length", type=int, help="--onnx: tokens per text at run time (default: the model's own)")
    p.add_argument("--int8", metavar="DIR", help="--onnx: also write an int8 dynamically quantized copy to DIR")
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Write ``args.model`` as the ``--st`` or the ``--onnx`` folder (and ``--int8``'s quantized copy)."""
    if args.st is not None:
        from contrastlab.train.job.export import export_run

        if args.max_seq_length is not None or args.int8 is not None:
            raise UsageError("export: --max-seq-length and --int8 go with --onnx, not --st")
        try:
            folder = export_run(args.model, args.st)
        except ValueError as e:  # not a text run, no checkpoint, an occupied output folder: named in the message
            raise UsageError(f"export: {one_line(e)}") from None
        print(f"written: {folder}  (SentenceTransformer({str(folder)!r}) loads it; contrastlab is not needed)")
        return EXIT_OK
    from contrastlab.export.onnx import export_model

    if args.max_seq_length is not None and args.max_seq_length < 1:
        raise UsageError(f"export: --max-seq-length must be >= 1, got {args.max_seq_length}")
    if args.int8 is not None and Path(args.int8).exists():
        raise UsageError(f"export: int8: {args.int8} already exists; give a new folder")
    try:
        out = export_model(args.model, args.onnx, max_seq_length=args.max_seq_length)
        print(f"written: {out / 'model.onnx'} (verified against PyTorch; load with contrastlab.export.load_onnx)")
        if args.int8 is not None:
            from contrastlab.export.quantize import quantize_int8

            print(f"written: {quantize_int8(out, args.int8) / 'model.onnx'} (int8 dynamic quantization)")
    except ValueError as e:  # bad input: the message names the argument (model, onnx) or the file
        raise UsageError(f"export: {one_line(e)}") from None
    return EXIT_OK
