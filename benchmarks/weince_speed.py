"""WEINCE vs NT-Xent loss time at SimCLR's batch: 2N = 512 views, D = 128, 2 threads.

Target (issue #6): WEINCE ≤ 1.5× NT-Xent (the paper reports 2.11 vs 0.65 ms, 3.2×, on an L40S).
Times are medians over repeated forward(+backward) calls on the same inputs, interleaved so that
both losses see the same machine load.

    python benchmarks/weince_speed.py [--n 256] [--d 128] [--threads 2] [--reps 60]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from contrastlab.losses import nt_xent, weince


def _time(fn: Callable[[], None], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


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

    times: dict[str, dict[str, list[float]]] = {k: {"fwd": [], "fwd_bwd": []} for k in losses}
    for f in losses.values():  # warm-up
        fwd_bwd(f)()
    for _ in range(args.reps // 10):  # interleave rounds so load changes hit every loss alike
        for name, f in losses.items():
            times[name]["fwd"] += _time(fwd(f), 10)
            times[name]["fwd_bwd"] += _time(fwd_bwd(f), 10)

    med = {k: {m: 1e3 * statistics.median(v) for m, v in t.items()} for k, t in times.items()}
    base = med["nt_xent"]
    print(f"2N = {2 * args.n} views, D = {args.d}, {args.threads} threads, torch {torch.__version__}, median of {args.reps}")
    print(f"{'loss':38s} {'fwd ms':>9s} {'×':>6s} {'fwd+bwd ms':>11s} {'×':>6s}")
    result = {}
    for name, m in med.items():
        r_f, r_fb = m["fwd"] / base["fwd"], m["fwd_bwd"] / base["fwd_bwd"]
        print(f"{name:38s} {m['fwd']:9.2f} {r_f:6.2f} {m['fwd_bwd']:11.2f} {r_fb:6.2f}")
        result[name] = {"fwd_ms": m["fwd"], "fwd_bwd_ms": m["fwd_bwd"], "ratio_fwd": r_f, "ratio_fwd_bwd": r_fb}
    return result


if __name__ == "__main__":
    main()
