"""Forward + backward time of in-batch InfoNCE against the matmul limit, for contrastlab and its peers.

For each N the script times, in one process and interleaved (A B C … A B C …), the three GEMMs an
exact forward + backward must do (the *matmul limit*) and one forward + backward of every
implementation that fits at that size, and prints one markdown table: median time and its ratio to
the limit. Sizes from 65,536 up run contrastlab's dense (streamed) and tiled paths only, once each,
without warm-up, in child processes that also report their peak resident memory and time the limit
(in row stripes).

Usage:
    python benchmarks/loss_speed.py                       # every size (the big ones take minutes)
    python benchmarks/loss_speed.py --sizes 256 1024 4096 --repeats 5
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
# Repeats per size (medians of these); sizes >= 65,536 run once.
REPEATS = {256: 30, 1024: 15, 4096: 7, 16384: 3}
# From this N on only contrastlab's two paths run, once each, in a child process (which also reports its
# peak RSS); the others' N × N logits do not fit in memory.
BIG = 65536
BIG_IMPLS = ("contrastlab dense", "contrastlab tiled")


def small_row(n: int, args: argparse.Namespace) -> list[str]:
    """Time the limit and every implementation that fits, interleaved, in this process."""
    a, p = C.make_inputs(n, args.dim)
    lim_fn, scale = C.matmul_limit_fn(n, args.dim)
    fns = {"limit": lim_fn}
    impls = [i for i in args.impls if n <= C.MAX_N[i]]
    slow = [i for i in impls if i in C.SLOW_IMPLS]  # seconds per step: timed apart, twice
    for impl in impls:
        if impl not in slow:
            fns[impl] = C.make_step(impl, a, p, args.block)
    repeats = args.repeats or REPEATS.get(n, 3)
    times = C.interleaved_medians(fns, repeats, warmup=1, clock=args.clock)
    for impl in slow:
        times[impl] = C.interleaved_medians({impl: C.make_step(impl, a, p)}, 2, warmup=0)[impl]
    return C.ratio_row(n, times, scale, args.impls, repeats, slow)


def big_row(here: str, n: int, args: argparse.Namespace) -> list[str]:
    """contrastlab's paths alone, once each, in child processes that also report peak RSS and the limit."""
    extra = ["--block", str(args.block)] if args.block else []
    row = [f"{n:,}", "—"]
    peaks = []
    for impl in args.impls:
        if impl not in BIG_IMPLS:
            row.append("—")
            continue
        argv = [here, "--child", str(n), "--child-impl", impl, "--dim", str(args.dim), "--threads", str(args.threads)]
        argv += ["--clock", args.clock]
        res = C.run_child([*argv, *extra])
        if "error" in res:
            row.append(res["error"])
            continue
        row[1] = C.fmt_time(res["limit"])
        row.append(f"{C.fmt_time(res['seconds'])} ({res['seconds'] / res['limit']:.2f}×)")
        peaks.append(f"{impl.removeprefix('contrastlab ')} {C.fmt_bytes(res['peak'])}")
    row.append(f"single run; peak RSS {', '.join(peaks)}")
    return row


def child(n: int, impl: str, d: int, block: int | None, clock: str) -> None:
    """One forward + backward of ``impl`` at size N (its time on ``clock`` and peak RSS), then the matmul limit."""
    a, p = C.make_inputs(n, d)
    step = C.make_step(impl, a, p, block)
    seconds = C.time_once(step, clock)
    peak = C.peak_rss_bytes()  # before the limit's stripes are allocated
    lim_fn, scale = C.matmul_limit_fn(n, d)
    lim_fn()  # warm-up stripe
    limit = C.median([C.time_once(lim_fn, clock) for _ in range(3)]) * scale
    print(json.dumps({"seconds": seconds, "peak": peak, "limit": limit}))


def main(argv: list[str] | None = None) -> int:
    """Run the speed benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="batch sizes N")
    ap.add_argument("--dim", type=int, default=D, help="embedding dimension D")
    ap.add_argument(
        "--clock", choices=tuple(C.CLOCKS), default="wall", help="wall time, or process CPU time (a shared machine)"
    )
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per size (default: by size)")
    ap.add_argument("--block", type=int, default=None, help="tile side of the tiled kernel (default: library's)")
    ap.add_argument("--impls", nargs="+", default=list(C.IMPLS), choices=C.IMPLS, help="implementations")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-impl", default="contrastlab tiled", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    C.set_threads(args.threads)
    if args.child:
        child(args.child, args.child_impl, args.dim, args.block, args.clock)
        return 0
    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/loss_speed.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    cols = ["N", "matmul limit", *args.impls, "noise"]
    rows = []
    t_start = time.perf_counter()
    here = str(Path(__file__).resolve())
    for n in args.sizes:
        if n >= BIG:
            rows.append(big_row(here, n, args))
        else:
            rows.append(small_row(n, args))
        print(f"  N = {n:,} done ({time.perf_counter() - t_start:.0f} s elapsed)", file=sys.stderr, flush=True)
    C.print_table(
        f"Forward + backward, in-batch InfoNCE, D = {args.dim}, {args.threads} threads: median {args.clock} time "
        "(ratio to the matmul limit)",
        cols,
        rows,
    )
    print(
        "\nmatmul limit: the three GEMMs of an exact forward + backward (S = QKᵀ, ∂Q = GK, ∂K = GᵀQ) into "
        "kept buffers, timed interleaved with the losses in this process (in 2,048-row stripes above 2^27 "
        "logits). ratio: median over rounds of time / limit in the same round. noise: half the "
        "(max − min)/median spread of the repeats, worst column. contrastlab masked: positive_mask with one "
        "duplicate per anchor. PML NTXentLoss solves SimCLR's 2N-view problem."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
