"""WEINCE vs NT-Xent loss time at SimCLR's batch (2N = 512 views) and beyond, D = 128, 2 threads.

Targets, forward + backward: at 2N = 512 WEINCE ≤ 1.25× NT-Xent (the paper reports 2.11 vs 0.65 ms,
3.2×, on an L40S); at 2N = 4,096 ≤ 1.3× streamed NT-Xent (``--sizes 512 4096`` gives both ratios in one
run). From 2N = 1,450 in float32 WEINCE streams blocks of anchors (``contrastlab.losses.weince.stream``);
the row ``streamed`` forces those blocks at every size (at 2N = 512 the default is the fused one-block
kernel), so that the two kernels can be compared where both apply. Times are medians over repeated forward(+backward) calls on the same inputs, interleaved in
rounds so that every loss sees the same machine load; the *matmul limit* of the 2N × 2N problem (the
three GEMMs of ``benchmarks/_common.py``, into kept buffers) runs in the same rounds, so each
forward + backward is also given as a ratio to it. Both wall-clock and process CPU time (summed over
the threads) are reported: on a shared, loaded machine the CPU time is the steadier of the two. Beside
the ratio of the medians, the *paired* ratio is the median over rounds of (this loss's median / NT-Xent's
median in the same round): both saw the same load, so it is steadier still (as
``_common.paired_ratio``).

    python benchmarks/weince_speed.py [--sizes 512 4096] [--d 128] [--threads 2] [--reps 60]
        [--losses nt_xent per_anchor streamed compiled one global_ema aux]

``--sizes`` are numbers of views 2N (N pairs each); ``--losses`` picks the rows (NT-Xent is always
timed: the ratios are to it). ``compiled`` (``weince(..., compiled=True)``: the streamed kernel with its
block pass compiled by ``torch.compile``) runs only when named; its compile is paid by the warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from contrastlab.losses import nt_xent, weince  # noqa: E402
from contrastlab.losses.weince.stream import block_anchors  # noqa: E402


def _time(fn: Callable[[], None], reps: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


#: The rows of the table: ``--losses`` key -> (label, loss of (z_a, z_b)).
LOSSES: dict[str, tuple[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "nt_xent": ("nt_xent", lambda za, zb: nt_xent(za, zb)),
    "per_anchor": ("weince (per_anchor, paper text)", lambda za, zb: weince(za, zb)),
    "streamed": (
        "weince (per_anchor, streamed blocks)",
        lambda za, zb: weince(za, zb, chunk_size=block_anchors(2 * za.shape[0], za.element_size(), None)),
    ),
    "compiled": (
        "weince (per_anchor, streamed, compiled)",
        lambda za, zb: weince(za, zb, compiled=True),
    ),
    "one": ("weince (beta_mode=one, code)", lambda za, zb: weince(za, zb, beta_mode="one")),
    "global_ema": ("weince (global_ema)", lambda za, zb: weince(za, zb, beta_mode="global_ema")),
    "aux": (
        "weince + top-50 aux (repro script)",
        lambda za, zb: weince(za, zb, beta_mode="one", aux_top_m=50),
    ),
}


def main(argv: list[str] | None = None) -> dict[int, dict[str, dict[str, float]]]:
    """Run the benchmark, print one table per size and return {2N: {name: {"fwd_ms", ..., "ratio_*"}}}."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512], help="numbers of views 2N (even)")
    parser.add_argument("--d", type=int, default=128, help="embedding dimension D")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=60, help="timed calls per loss and kind (rounds of 10)")
    parser.add_argument("--losses", nargs="+", choices=sorted(LOSSES), default=[k for k in LOSSES if k != "compiled"])
    args = parser.parse_args(argv)
    for size in args.sizes:
        if size < 4 or size % 2:
            parser.error(f"--sizes must be even numbers of views >= 4, got {size}")
    torch.set_num_threads(args.threads)
    names = ["nt_xent", *(k for k in LOSSES if k in args.losses and k != "nt_xent")]
    return {size: _run(size // 2, args.d, args.threads, args.reps, names) for size in args.sizes}


def _run(n: int, d: int, threads: int, reps: int, names: list[str]) -> dict[str, dict[str, float]]:
    """One size: N pairs. Prints the table and returns {label: figures}."""
    g = torch.Generator().manual_seed(0)
    za = torch.randn(n, d, generator=g)
    zb = 0.6 * za + 0.4 * torch.randn(n, d, generator=g)
    za.requires_grad_()
    zb.requires_grad_()

    def bind(f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], torch.Tensor]:
        return lambda: f(za, zb)

    losses = {LOSSES[k][0]: bind(LOSSES[k][1]) for k in names}

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
    limit_fn, scale = C.matmul_limit_fn(2 * n, d)  # the (2N × 2N) problem's three GEMMs, kept buffers
    limit: dict[str, list[float]] = {"fwd_bwd": [], "fwd_bwd_cpu": []}
    limit_fn()
    for f in losses.values():  # warm-up (a compiled pass compiles here, with and without gradient)
        fwd_bwd(f)()
        fwd(f)()
    rounds: dict[str, dict[str, list[float]]] = {k: {m: [] for m in kinds} for k in losses}  # per-round medians
    for _ in range(max(1, reps // 10)):  # interleave rounds so load changes hit every loss alike
        wall, cpu = _time(limit_fn, 10)
        limit["fwd_bwd"] += wall
        limit["fwd_bwd_cpu"] += cpu
        for name, f in losses.items():
            for kind, run in (("fwd", fwd(f)), ("fwd_bwd", fwd_bwd(f))):
                wall, cpu = _time(run, 10)
                times[name][kind] += wall
                times[name][kind + "_cpu"] += cpu
                rounds[name][kind].append(statistics.median(wall))
                rounds[name][kind + "_cpu"].append(statistics.median(cpu))

    med = {k: {m: 1e3 * statistics.median(v) for m, v in t.items()} for k, t in times.items()}
    lim = {m: 1e3 * scale * statistics.median(v) for m, v in limit.items()}
    base = med["nt_xent"]
    print(
        f"2N = {2 * n} views, D = {d}, {threads} threads, torch {torch.__version__}, median of "
        f"{10 * max(1, reps // 10)}; matmul limit (2N × 2N, kept buffers) {lim['fwd_bwd']:.2f} ms, "
        f"CPU {lim['fwd_bwd_cpu']:.2f} ms; load average after: {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'loss':36s} {'fwd ms':>8s} {'×':>5s} {'fwd+bwd ms':>10s} {'×':>5s} {'paired':>6s} {'/limit':>6s}   "
        f"{'CPU fwd+bwd ms':>14s} {'×':>5s} {'paired':>6s}"
    )
    result = {}
    base_rounds = rounds["nt_xent"]
    for name, m in med.items():
        r = {kind: m[kind] / base[kind] for kind in kinds}
        paired = {
            kind: statistics.median(x / y for x, y in zip(rounds[name][kind], base_rounds[kind], strict=True))
            for kind in kinds
        }
        to_limit = m["fwd_bwd"] / lim["fwd_bwd"]
        print(
            f"{name:36s} {m['fwd']:8.2f} {r['fwd']:5.2f} {m['fwd_bwd']:10.2f} {r['fwd_bwd']:5.2f} "
            f"{paired['fwd_bwd']:6.2f} {to_limit:6.2f}   "
            f"{m['fwd_bwd_cpu']:14.2f} {r['fwd_bwd_cpu']:5.2f} {paired['fwd_bwd_cpu']:6.2f}"
        )
        result[name] = {
            **{f"{kind}_ms": m[kind] for kind in kinds},
            **{f"ratio_{kind}": v for kind, v in r.items()},
            **{f"paired_{kind}": v for kind, v in paired.items()},
            "ratio_limit": to_limit,
        }
    return result


if __name__ == "__main__":
    main()
