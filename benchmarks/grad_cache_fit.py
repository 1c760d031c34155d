"""A fine-tune whose batch does not fit a memory budget without gradient caching, and does with it.

Each mode runs ``fit`` (InfoNCE, τ = 0.1, Adam) for ``--steps`` steps over ``--batch`` pairs per step,
on one of two encoders without BatchNorm (so gradient caching applies):

* ``tinyvit``: a TinyViT (width 32, depth 2) on random 32×32 images;
* ``minilm``: the bundled all-MiniLM-L6-v2 (training mode, dropout on; ``benchmarks/_minilm.py``) on
  the train pairs of the docstring code corpus, ``--seq-len`` tokens per text; each step takes the
  first B of a seeded permutation of the pairs.

Each mode runs in a fresh process whose *new* memory is capped: after building model and batches and
one uncached warm-up step on ``--minibatch`` rows (the optimiser's state; a full-batch warm-up would
need the very memory that is missing), the process measures its data segment (``VmData`` in
``/proc/self/status``) and sets ``RLIMIT_DATA`` to that plus ``--budget-mib``, so every allocation
beyond the budget fails with a ``RuntimeError`` instead of growing the process (Linux counts private
anonymous mappings, where large tensors live, in ``RLIMIT_DATA``); the cap makes it safe to try the
uncached step at a batch far larger than the machine's memory. With ``--out-dir`` the run writes its
metrics and a checkpoint every step. The parent prints whether each mode completed, its peak RSS
(``VmHWM``), wall and CPU time, and the loss of each step.

Usage:
    python benchmarks/grad_cache_fit.py --batch 512 --budget-mib 192 --minibatch 64
    python benchmarks/grad_cache_fit.py --encoder minilm --seq-len 32 --batch 2048 --budget-mib 4096 \
        --minibatch 64 --steps 3 --lr 2e-5 --out-dir runs/grad-cache-fit
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import torch  # noqa: E402


def _vm_data_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


def setup(args: argparse.Namespace) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model and one batch of ``--batch`` (anchor, positive) pairs per step."""
    from contrastlab.train import step_generator

    torch.manual_seed(0)
    if args.encoder == "minilm":
        import _minilm

        model, tokenizer = _minilm.load_minilm(args.seq_len)
        pairs = _minilm.tokenised_pairs(tokenizer, args.seq_len)
        n = pairs.shape[0]
        # each step: the first B of a seeded permutation of the train pairs (repeated if B > N)
        index = [
            torch.randperm(n, generator=step_generator(0, s)).repeat(-(-args.batch // n)) for s in range(args.steps)
        ]
        return model, [_minilm.batch_of(pairs, ix[: args.batch]) for ix in index]
    from contrastlab.models import TinyViT

    model = TinyViT(3, 32, 64, width=32, depth=2)
    batches = []
    for step in range(args.steps):
        g = step_generator(0, step)
        x = torch.rand(args.batch, 3, 32, 32, generator=g)
        batches.append((x, (x + 0.05 * torch.randn(x.shape, generator=g)).clamp(0, 1)))
    return model, batches


def child(mode: str, args: argparse.Namespace) -> None:
    """Run one capped fine-tune in this process and print a JSON line."""
    from contrastlab.losses import info_nce
    from contrastlab.train import EmbeddingObjective, OptimConfig, TrainConfig, fit

    model, batches = setup(args)
    objective = EmbeddingObjective(
        inputs=lambda b: torch.cat(b), loss=lambda e, b: info_nce(*e.split(b[0].shape[0]), temperature=0.1)
    )
    config = TrainConfig(
        steps=args.steps, progress=False, embed_minibatch=args.minibatch if mode == "cached" else None,
        optim=OptimConfig(lr=args.lr), log_every=1, checkpoint_every=1 if args.out_dir else 0,
    )  # fmt: skip
    # warm-up outside the cap, uncached on a small batch (the optimiser's state, lazy allocations): a
    # step at the full batch would need, without caching, the memory this benchmark shows is missing
    small = tuple(t[: max(1, args.minibatch // 2)] for t in batches[0])
    fit(model, objective, lambda s: small, replace(config, steps=1, embed_minibatch=None, checkpoint_every=0))
    limit = _vm_data_bytes() + args.budget_mib * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    out_dir = Path(args.out_dir) / mode if args.out_dir else None
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result = fit(model, objective, lambda s: batches[s], config, out_dir=out_dir)
    except (RuntimeError, MemoryError) as e:
        print(json.dumps({"ok": False, "error": str(e).splitlines()[0][:120], "peak": C.peak_rss_bytes()}))
        return
    print(
        json.dumps(
            {
                "ok": True,
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "peak": C.peak_rss_bytes(),
                "losses": [row["loss"] for row in result.history],
                "checkpoints": sorted(p.name for p in out_dir.iterdir()) if out_dir else [],
            }
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Run plain and cached fine-tunes under the cap and print one markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", choices=("tinyvit", "minilm"), default="tinyvit", help="the encoder fine-tuned")
    ap.add_argument("--batch", type=int, default=512, help="pairs per step B (2B rows)")
    ap.add_argument("--seq-len", type=int, default=32, help="MiniLM: tokens per text (max_seq_length, padded)")
    ap.add_argument("--minibatch", type=int, default=64, help="rows per forward pass when caching")
    ap.add_argument("--steps", type=int, default=3, help="optimiser steps under the cap")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    ap.add_argument("--budget-mib", type=int, default=192, help="memory the process may allocate beyond its set-up")
    ap.add_argument("--modes", nargs="+", choices=("plain", "cached"), default=["plain", "cached"], help="what runs")
    ap.add_argument("--out-dir", help="write metrics and a checkpoint every step under OUT_DIR/MODE")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    C.set_threads(args.threads)
    if args.child:
        child(args.child, args)
        return 0
    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/grad_cache_fit.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    here = str(Path(__file__).resolve())
    passed = list(argv if argv is not None else sys.argv[1:])
    rows = []
    for mode in args.modes:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        res = C.run_child([here, *passed, "--child", mode], timeout=7200)
        print(f"  {mode} (load average at start {load}): {res}", file=sys.stderr, flush=True)
        if res.get("ok"):
            losses = ", ".join(f"{x:.3f}" for x in res["losses"])
            rows.append(
                [mode, "completed", C.fmt_bytes(res["peak"]), f"{C.fmt_time(res['seconds'])} / {C.fmt_time(res['cpu_seconds'])}", losses, load]
            )  # fmt: skip
        else:
            rows.append([mode, f"failed: {res.get('error', '?')}", C.fmt_bytes(res.get("peak")), "—", "—", load])
    minibatch = f"{args.minibatch} rows per forward"
    C.print_table(
        f"fit, {setup_description(args)}, {args.batch} pairs ({2 * args.batch} rows) per step, {args.steps} steps, "
        f"new memory capped at {args.budget_mib} MiB (RLIMIT_DATA), {args.threads} threads; cached = {minibatch}",
        ["mode", "outcome", "peak RSS", "time (wall / CPU)", "loss per step", "load average at start"],
        rows,
    )
    return 0


def setup_description(args: argparse.Namespace) -> str:
    """The encoder and data, in words (without building them)."""
    if args.encoder == "minilm":
        return f"all-MiniLM-L6-v2 ({args.seq_len} tokens per text, dropout on), code-corpus pairs"
    return "TinyViT (width 32, depth 2), random 32×32 images"


if __name__ == "__main__":
    raise SystemExit(main())
