"""WEINCE vs NT-Xent loss time at SimCLR's batch: 2N = 512 views, D = 128, 2 threads.

Target: WEINCE ≤ 1.25× NT-Xent in forward + backward (the paper reports 2.11 vs 0.65 ms, 3.2×, on an
L40S). Times are medians over repeated forward(+backward) calls on the same inputs, interleaved in
rounds so that every loss sees the same machine load; the *matmul limit* of the 2N × 2N problem (the
three GEMMs of ``benchmarks/_common.py``, into kept buffers) runs in the same rounds, so each
forward + backward is also given as a ratio to it. Both wall-clock and process CPU time (summed over
the threads) are reported: on a shared, loaded machine the CPU time is the steadier of the two.

    python benchmarks/weince_speed.py [--n 256] [--d 128] [--threads 2] [--reps 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from contrastlab.losses import nt_xent, weince  # noqa: E402


def _time(fn: Callable[[], None], reps: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the benchmark, print a table and return {name: {"fwd_ms", "fwd_bwd_ms", "ratio"}}."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="pairs N (2N views)")
    parser.add_argument("--d", type=int, default=128, help="embedding dimension D")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=60)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    za = torch.randn(args.n, args.d, generator=g)
    zb = 0.6 * za + 0.4 * torch.randn(args.n, args.d, generator=g)
    za.requires_grad_()
    zb.requires_grad_()

    losses: dict[str, Callable[[], torch.Tensor]] = {
        "nt_xent": lambda: nt_xent(za, zb),
        "weince (per_anchor, paper text)": lambda: weince(za, zb),
        "weince (beta_mode=one, code)": lambda: weince(za, zb, beta_mode="one"),
        "weince (global_ema)": lambda: weince(za, zb, beta_mode="global_ema"),
        "weince + top-50 aux (repro script)": lambda: weince(za, zb, beta_mode="one", aux_top_m=50),
    }

    def fwd(f: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                f()

        return run

    def fwd_bwd(f: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            torch.autograd.grad(f(), [za, zb])

        return run

    kinds = ("fwd", "fwd_bwd", "fwd_cpu", "fwd_bwd_cpu")
    times: dict[str, dict[str, list[float]]] = {k: {m: [] for m in kinds} for k in losses}
    limit_fn, _ = C.matmul_limit_fn(2 * args.n, args.d)  # the (2N × 2N) problem's three GEMMs, kept buffers
    limit: dict[str, list[float]] = {"fwd_bwd": [], "fwd_bwd_cpu": []}
    limit_fn()
    for f in losses.values():  # warm-up
        fwd_bwd(f)()
    for _ in range(max(1, args.reps // 10)):  # interleave rounds so load changes hit every loss alike
        wall, cpu = _time(limit_fn, 10)
        limit["fwd_bwd"] += wall
        limit["fwd_bwd_cpu"] += cpu
        for name, f in losses.items():
            for kind, run in (("fwd", fwd(f)), ("fwd_bwd", fwd_bwd(f))):
                wall, cpu = _time(run, 10)
                times[name][kind] += wall
                times[name][kind + "_cpu"] += cpu

    med = {k: {m: 1e3 * statistics.median(v) for m, v in t.items()} for k, t in times.items()}
    lim = {m: 1e3 * statistics.median(v) for m, v in limit.items()}
    base = med["nt_xent"]
    print(
        f"2N = {2 * args.n} views, D = {args.d}, {args.threads} threads, torch {torch.__version__}, median of "
        f"{args.reps}; matmul limit (2N × 2N, kept buffers) {lim['fwd_bwd']:.2f} ms, CPU {lim['fwd_bwd_cpu']:.2f} ms"
    )
    print(
        f"{'loss':36s} {'fwd ms':>8s} {'×':>5s} {'fwd+bwd ms':>10s} {'×':>5s} {'/limit':>6s}   "
        f"{'CPU fwd+bwd ms':>14s} {'×':>5s}"
    )
    result = {}
    for name, m in med.items():
        r = {kind: m[kind] / base[kind] for kind in kinds}
        to_limit = m["fwd_bwd"] / lim["fwd_bwd"]
        print(
            f"{name:36s} {m['fwd']:8.2f} {r['fwd']:5.2f} {m['fwd_bwd']:10.2f} {r['fwd_bwd']:5.2f} {to_limit:6.2f}   "
            f"{m['fwd_bwd_cpu']:14.2f} {r['fwd_bwd_cpu']:5.2f}"
        )
        result[name] = {
            **{f"{kind}_ms": m[kind] for kind in kinds},
            **{f"ratio_{kind}": v for kind, v in r.items()},
            "ratio_limit": to_limit,
        }
    return result


if __name__ == "__main__":
    main()
