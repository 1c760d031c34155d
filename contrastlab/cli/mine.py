"""``contrastlab mine [MODEL] --out FILE``: mine hard negatives for a pairs file."""

from __future__ import annotations

import argparse
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command, add_engine_and_shards, model_overrides, one_line

OVERRIDES = True


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab mine``."""
    p = add_command(
        sub,
        "mine",
        model_config(),
        help="mine hard negatives for a pairs file (writes a pairs file with negative columns)",
        description="Mine each anchor's hard negatives among the file's distinct positives, filtered as "
        "sentence-transformers' mine_hard_negatives filters them (range_min, range_max, max_score, min_score, "
        "margin, relative_margin, sampling), plus max_probability: a cap on the model's softmax-search "
        "probability of a candidate over the whole corpus. Writes anchor, positive, negative_1..K rows (n-tuple) "
        "or anchor, positive, negative rows (triplet) that `contrastlab train` (data.text.path) reads.",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="minilm, a sentence-transformers/Hugging Face folder or cached name, a contrastlab text run, or a .npy",
    )
    p.add_argument("--pairs", help="TSV/CSV/JSONL file or saved datasets folder of (anchor, positive) pairs")
    p.add_argument("--out", required=True, help="the output pairs file (.tsv, .csv or .jsonl)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_engine_and_shards(p, "document shards with --engine ray (default: one per Ray node)")
    return p


def model_config() -> type:
    """The config whose fields ``--FIELD VALUE`` sets after the optional MODEL."""
    from contrastlab.mine import MineConfig

    return MineConfig


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Mine the pairs file's hard negatives with ``args.model`` and write them to ``args.out``."""
    from contrastlab.config import apply_overrides
    from contrastlab.mine import MineConfig, mine_pairs
    from contrastlab.scale.cluster import Engine

    cfg = apply_overrides(MineConfig(), model_overrides(args, rest))
    try:
        engine = Engine(args.engine, args.address)
        summary = mine_pairs(cfg, args.out, engine=engine, shards=args.shards)
    except ValueError as e:  # bad input: the message names the argument
        raise UsageError(f"mine: {one_line(e)}") from None
    cap = (
        ""
        if cfg.max_probability is None
        else f"; max_probability {cfg.max_probability:g} at temperature {cfg.temperature:g}"
    )
    print(
        f"{summary['complete']} of {summary['anchors']} anchors kept {cfg.num_negatives} negatives; "
        f"{summary['rows']} rows written ({cfg.output_format}){cap}"
    )
    print(f"written: {summary['out']}\noptions: {summary['sidecar']}")
    return EXIT_OK
