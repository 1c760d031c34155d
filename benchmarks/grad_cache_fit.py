"""A fine-tune whose batch does not fit a memory budget without gradient caching, and does with it.

Each mode runs ``fit`` (InfoNCE, τ = 0.1, Adam) for ``--steps`` steps on a TinyViT (LayerNorm only, so
gradient caching applies) over ``--batch`` pairs of random 32×32 images, in a fresh process whose
*new* memory is capped: the process measures its data segment after building model and batches
(``VmData`` in ``/proc/self/status``) and sets ``RLIMIT_DATA`` to that plus ``--budget-mib``, so
every allocation beyond the budget fails (Linux counts private anonymous mappings, where large
tensors live, in ``RLIMIT_DATA``). The parent prints whether each mode completed, its peak RSS and time.

Usage:
    python benchmarks/grad_cache_fit.py --batch 512 --budget-mib 192 --minibatch 64
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import torch  # noqa: E402


def _vm_data_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


def child(mode: str, batch: int, minibatch: int, steps: int, budget_mib: int) -> None:
    """Run one capped fine-tune in this process and print a JSON line."""
    from contrastlab.losses import info_nce
    from contrastlab.models import TinyViT
    from contrastlab.train import EmbeddingObjective, OptimConfig, TrainConfig, fit, step_generator

    torch.manual_seed(0)
    model = TinyViT(3, 32, 64, width=32, depth=2)
    objective = EmbeddingObjective(
        inputs=lambda b: torch.cat(b), loss=lambda e, b: info_nce(*e.split(b[0].shape[0]), temperature=0.1)
    )
    batches = []
    for step in range(steps):
        g = step_generator(0, step)
        x = torch.rand(batch, 3, 32, 32, generator=g)
        batches.append((x, (x + 0.05 * torch.randn(x.shape, generator=g)).clamp(0, 1)))
    config = TrainConfig(
        steps=steps, progress=False, embed_minibatch=minibatch if mode == "cached" else None,
        optim=OptimConfig(lr=1e-3),
    )  # fmt: skip
    fit(model, objective, lambda s: batches[s], replace_steps(config, 1))  # warm-up outside the cap
    limit = _vm_data_bytes() + budget_mib * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    t0 = time.perf_counter()
    try:
        result = fit(model, objective, lambda s: batches[s], config)
    except (RuntimeError, MemoryError) as e:
        print(json.dumps({"ok": False, "error": str(e).splitlines()[0][:120], "peak": C.peak_rss_bytes()}))
        return
    loss = result.history[-1]["loss"]
    print(json.dumps({"ok": True, "seconds": time.perf_counter() - t0, "peak": C.peak_rss_bytes(), "loss": loss}))


def replace_steps(config, steps: int):  # type: ignore[no-untyped-def]
    """``config`` with another number of steps."""
    from dataclasses import replace

    return replace(config, steps=steps, log_every=1)


def main(argv: list[str] | None = None) -> int:
    """Run plain and cached fine-tunes under the cap and print one markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512, help="pairs per step B (2B rows)")
    ap.add_argument("--minibatch", type=int, default=64, help="rows per forward pass when caching")
    ap.add_argument("--steps", type=int, default=3, help="optimiser steps under the cap")
    ap.add_argument("--budget-mib", type=int, default=192, help="memory the process may allocate beyond its set-up")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    C.set_threads(args.threads)
    if args.child:
        child(args.child, args.batch, args.minibatch, args.steps, args.budget_mib)
        return 0
    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/grad_cache_fit.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    here = str(Path(__file__).resolve())
    rows = []
    for mode in ("plain", "cached"):
        res = C.run_child(
            [here, "--child", mode, "--batch", str(args.batch), "--minibatch", str(args.minibatch),
             "--steps", str(args.steps), "--budget-mib", str(args.budget_mib), "--threads", str(args.threads)],
            timeout=7200,
        )  # fmt: skip
        print(f"  {mode}: {res}", file=sys.stderr, flush=True)
        if res.get("ok"):
            rows.append([mode, "completed", C.fmt_bytes(res["peak"]), C.fmt_time(res["seconds"]), f"{res['loss']:.4f}"])
        else:
            rows.append([mode, f"failed: {res.get('error', '?')}", C.fmt_bytes(res.get("peak")), "—", "—"])
    C.print_table(
        f"fit, TinyViT (width 32, depth 2), {args.batch} pairs ({2 * args.batch} rows) per step, {args.steps} steps, "
        f"new memory capped at {args.budget_mib} MiB (RLIMIT_DATA), {args.threads} threads; cached = "
        f"{args.minibatch} rows per forward",
        ["mode", "outcome", "peak RSS", "time", "last logged loss"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
