"""Peak resident memory of one WEINCE forward + backward against NT-Xent's, one child process per run.

Target: at 2N = 32,768 views WEINCE's peak (increase over the process's RSS after import and inputs)
is at most 2× streamed NT-Xent's. Each (loss, 2N) runs in a fresh Python process that builds the two
(N, D) views, records its resident set size (the baseline), does one forward + backward and reports
its peak (``VmHWM``) and the time of that single step; the parent prints one markdown table with each
increase and its ratio to NT-Xent's at the same size.

    python benchmarks/weince_memory.py [--sizes 4096 32768] [--d 128] [--threads 2]
        [--losses nt_xent per_anchor one global_ema]

``--sizes`` are numbers of views 2N (N pairs each). ``global_ema`` adds the global β_t, whose tail
holds 5% of all (2N)² negatives by definition (the one statistic that is not linear in N).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from contrastlab.losses import nt_xent, weince  # noqa: E402

#: ``--losses`` key -> loss of (z_a, z_b), every one with its library defaults (τ = 0.5).
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "nt_xent": lambda za, zb: nt_xent(za, zb),
    "per_anchor": lambda za, zb: weince(za, zb),
    "one": lambda za, zb: weince(za, zb, beta_mode="one"),
    "global_ema": lambda za, zb: weince(za, zb, beta_mode="global_ema"),
}


def child(loss: str, views: int, d: int) -> None:
    """Measure one configuration in this process and print a JSON line."""
    g = torch.Generator().manual_seed(0)
    za = torch.randn(views // 2, d, generator=g)
    zb = (0.6 * za + 0.4 * torch.randn(views // 2, d, generator=g)).requires_grad_()
    za.requires_grad_()
    baseline = C.current_rss_bytes()
    t0 = time.perf_counter()
    torch.autograd.grad(LOSSES[loss](za, zb), [za, zb])
    seconds = time.perf_counter() - t0
    print(json.dumps({"peak": C.peak_rss_bytes(), "baseline": baseline, "seconds": seconds}))


def main(argv: list[str] | None = None) -> dict[int, dict[str, dict[str, float]]]:
    """Run every (loss, 2N) in a child; print the table and return {2N: {loss: {"increase", "ratio", ...}}}."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 32768], help="numbers of views 2N (even)")
    ap.add_argument("--d", type=int, default=128, help="embedding dimension D")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument("--losses", nargs="+", choices=sorted(LOSSES), default=["nt_xent", "per_anchor", "one"])
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per child")
    ap.add_argument("--child", nargs=2, metavar=("LOSS", "VIEWS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for size in args.sizes:
        if size < 4 or size % 2:
            ap.error(f"--sizes must be even numbers of views >= 4, got {size}")
    C.set_threads(args.threads)
    if args.child:
        child(args.child[0], int(args.child[1]), args.d)
        return {}

    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/weince_memory.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    names = ["nt_xent", *(k for k in args.losses if k != "nt_xent")]
    here = str(Path(__file__).resolve())
    rows, result = [], {}
    for size in args.sizes:
        res = {}
        for name in names:
            argv_child = [here, "--child", name, str(size), "--d", str(args.d), "--threads", str(args.threads)]
            res[name] = C.run_child(argv_child, timeout=args.timeout)
            print(f"  2N = {size:,} {name}: {res[name]}", file=sys.stderr, flush=True)
        base = res["nt_xent"]
        row, result[size] = [f"{size:,}"], {}
        for name in names:
            r = res[name]
            if "error" in r:
                row.append(r["error"])
                continue
            inc = r["peak"] - r["baseline"]
            ratio = inc / (base["peak"] - base["baseline"]) if "error" not in base else float("nan")
            result[size][name] = {"increase": inc, "peak": r["peak"], "seconds": r["seconds"], "ratio": ratio}
            row.append(f"+{C.fmt_bytes(inc)} ({ratio:.2f}×; {C.fmt_time(r['seconds'])})")
        rows.append(row)
    C.print_table(
        f"Peak RSS increase of one forward + backward, D = {args.d}, {args.threads} threads "
        "(× NT-Xent's increase at the same 2N; time of that single step)",
        ["2N", *names],
        rows,
    )
    return result


if __name__ == "__main__":
    main()
