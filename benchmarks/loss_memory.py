"""Peak resident memory of one forward + backward of in-batch InfoNCE, one child process per configuration.

Each (implementation, N) runs in a fresh Python process that imports torch, builds the (N, D) inputs,
records its resident set size (the *baseline*), does one forward + backward and reports its peak
resident set size (``ru_maxrss``) and the time of that single step. The parent prints one markdown
table: peak RSS (and the increase over the baseline).

Usage:
    python benchmarks/loss_memory.py                       # every size (the big ones take minutes)
    python benchmarks/loss_memory.py --sizes 256 4096
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

SIZES = (256, 1024, 4096, 16384, 65536, 131072)
D = 128


def child(impl: str, n: int, d: int, block: int | None) -> None:
    """Measure one configuration in this process and print a JSON line."""
    a, p = C.make_inputs(n, d)
    step = C.make_step(impl, a, p, block)
    baseline = C.current_rss_bytes()
    t0 = time.perf_counter()
    step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"peak": C.peak_rss_bytes(), "baseline": baseline, "seconds": seconds}))


def main(argv: list[str] | None = None) -> int:
    """Run the memory benchmark (or, with ``--child``, one configuration) and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="batch sizes N")
    ap.add_argument("--dim", type=int, default=D, help="embedding dimension D")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument("--block", type=int, default=None, help="tile side of the tiled kernel (default: library's)")
    ap.add_argument("--impls", nargs="+", default=list(C.IMPLS), choices=C.IMPLS, help="implementations")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per child")
    ap.add_argument("--child", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    C.set_threads(args.threads)
    if args.child:
        child(args.child[0], int(args.child[1]), args.dim, args.block)
        return 0

    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/loss_memory.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    here = str(Path(__file__).resolve())
    rows = []
    for n in args.sizes:
        row = [f"{n:,}"]
        for impl in args.impls:
            if n > C.MAX_N[impl]:
                row.append("—")
                continue
            extra = ["--block", str(args.block)] if args.block else []
            res = C.run_child(
                [here, "--child", impl, str(n), "--dim", str(args.dim), "--threads", str(args.threads), *extra],
                timeout=args.timeout,
            )
            if "error" in res:
                row.append(res["error"])
            else:
                row.append(
                    f"{C.fmt_bytes(res['peak'])} (+{C.fmt_bytes(res['peak'] - res['baseline'])}; "
                    f"{C.fmt_time(res['seconds'])})"
                )
            print(f"  N = {n:,} {impl}: {row[-1]}", file=sys.stderr, flush=True)
        rows.append(row)
    C.print_table(
        f"Peak RSS of one forward + backward, in-batch InfoNCE, D = {args.dim}, {args.threads} threads "
        "(increase over the process's RSS after import and inputs; time of that single step)",
        ["N", *args.impls],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
