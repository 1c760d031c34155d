"""``contrastlab eval RUN_DIR``: evaluate a trained run's last checkpoint on its held-out set."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab eval``."""
    p = add_command(sub, "eval", help="evaluate a trained run on its held-out set", description="Re-evaluate a run.")
    p.add_argument("run_dir", help="a folder written by `contrastlab train`")
    p.add_argument("--out", help="where to write the metrics (default RUN_DIR/eval.json)")
    return p


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """Print the metrics of ``args.run_dir``'s checkpoint and write them to ``args.out``."""
    import torch

    from contrastlab.config import read_config
    from contrastlab.io import write_json_atomic
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.runner import build_encoder, build_source, check_job, make_eval_fn
    from contrastlab.train.loop.checkpoint import latest_checkpoint
    from contrastlab.train.loop.trainer import resolve_device

    run_dir = Path(args.run_dir)
    if not (run_dir / "config.json").is_file():
        raise UsageError(f"eval: {run_dir} is not a training run folder (no config.json; made by `contrastlab train`)")
    cfg = read_config(JobConfig, run_dir / "config.json", verified=True)  # checksum verified first
    state = latest_checkpoint(run_dir)
    if state is None:
        raise UsageError(f"eval: {run_dir} has no checkpoint.pt")
    source = build_source(cfg)
    check_job(cfg, source)
    model = build_encoder(cfg, source)
    model.load_state_dict(state["model"])
    model.to(resolve_device(cfg.train.device)).eval()
    with torch.no_grad():
        metrics = make_eval_fn(cfg, source)(model, int(state["step"]))
    for k, v in metrics.items():
        print(f"{k:>12}  {v:.6g}")
    out = Path(args.out) if args.out else run_dir / "eval.json"
    write_json_atomic(out, {"step": int(state["step"]), "metrics": metrics})
    print(f"written: {out}")
    return EXIT_OK
