"""The kernel targets in one run: masked InfoNCE and SigLIP, eager and compiled, and tiled InfoNCE's tile side.

Part 1, in this process at N = 4,096 (``--n``): the matmul limit (the three GEMMs of an exact forward +
backward, ``_common.matmul_limit_fn``), the dense InfoNCE step for reference, masked InfoNCE
(``positive_mask`` with one duplicate per anchor) with the eager and the compiled pass
(``compiled=True``), SigLIP (learnable t and b) with the eager and the compiled pass, and NT-Xent and
WEINCE's streamed kernel (eager and compiled) on SimCLR's 2N = N views (the same N × N problem), timed
interleaved (A B C … A B C …) on both clocks at once (wall and process CPU). The warm-up round pays the
compiles; their time is printed apart. Ratios are medians over rounds of time / limit in the same round.

Part 2, at N = 65,536 (``--big-n``), one child process per configuration: tiled InfoNCE (a mean) with
``chunk_size=None`` (the tile side measured by ``contrastlab.losses.stripe_calibration``; its
calibration is timed apart, before the steps) and with fixed sides (``--fixed-chunks``, default 2,048
and 4,096, the former defaults). Each child times ``--big-steps`` forward + backward steps (the first
cold, the last reported), then the matmul limit in 2,048-row stripes, and reports its peak RSS.

Usage:
    python benchmarks/kernel_targets.py --profile             # the targets: about 4–5 minutes on 2 idle cores
    python benchmarks/kernel_targets.py --n 256 --big-n 2048 --repeats 2 --big-steps 1   # a smoke run

``--profile`` adds, after part 1's timing, each function's operator breakdown (``torch.profiler``): the
GEMMs' share of the CPU time and the costliest other operators (a compiled pass shows as one entry).
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
import siglip_speed  # noqa: E402

from contrastlab.losses import info_nce, nt_xent, tiled, weince  # noqa: E402
from contrastlab.losses.weince.stream import block_anchors  # noqa: E402

TEMPERATURE = C.TEMPERATURE
PART1 = (
    "InfoNCE dense",
    "masked eager",
    "masked compiled",
    "SigLIP eager",
    "SigLIP compiled",
    "NT-Xent",
    "WEINCE eager",
    "WEINCE compiled",
)


def _masked_step(a: torch.Tensor, p: torch.Tensor, compiled: bool) -> Callable[[], None]:
    """Masked InfoNCE (rows 2i and 2i + 1 duplicates, marked as extra positives), forward + backward."""
    label = torch.arange(a.shape[0]) // 2
    mask = label[:, None] == label[None, :]

    def step() -> None:
        a.grad = None
        p.grad = None
        info_nce(a, p, temperature=TEMPERATURE, positive_mask=mask, compiled=compiled).backward()

    return step


def _views_step(loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], n: int, d: int) -> Callable[[], None]:
    """SimCLR's 2N = ``n`` views (``n // 2`` pairs): one forward + backward of ``loss(z_a, z_b)``."""
    za, zb = C.make_inputs(n // 2, d, seed=1)

    def step() -> None:
        torch.autograd.grad(loss(za, zb), [za, zb])

    return step


def make_part1(a: torch.Tensor, p: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The functions of part 1, by name (NT-Xent and WEINCE on 2N = N views: the same N × N problem)."""
    n, d = a.shape
    siglip_eager = siglip_speed.make_step("contrastlab", a, p)
    siglip_compiled = siglip_speed.make_step("contrastlab compiled", a, p)
    assert siglip_eager is not None and siglip_compiled is not None
    return {
        "InfoNCE dense": C.make_step("contrastlab dense", a, p),
        "masked eager": _masked_step(a, p, False),
        "masked compiled": _masked_step(a, p, True),
        "SigLIP eager": siglip_eager,
        "SigLIP compiled": siglip_compiled,
        "NT-Xent": _views_step(lambda za, zb: nt_xent(za, zb), n, d),
        # the streamed kernel in both (chunk_size: the blocks chunk_size=None would take beyond 2N = 1,448)
        "WEINCE eager": _views_step(lambda za, zb: weince(za, zb, chunk_size=block_anchors(n, 4, None)), n, d),
        "WEINCE compiled": _views_step(lambda za, zb: weince(za, zb, compiled=True), n, d),
    }


def _both_clocks(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and process CPU time of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def part1(args: argparse.Namespace) -> None:
    """Time part 1 and print its table."""
    a, p = C.make_inputs(args.n, args.dim)
    limit_fn, scale = C.matmul_limit_fn(args.n, args.dim)
    fns: dict[str, Callable[[], object]] = {"limit": limit_fn, **make_part1(a, p)}
    first = {name: _both_clocks(fn) for name, fn in fns.items()}  # the warm-up: the compiles happen here
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            times[name].append(_both_clocks(fn))
    rows = []
    for clock, i in (("wall", 0), ("CPU", 1)):
        lim = [t[i] * scale for t in times["limit"]]
        row = [clock, C.fmt_time(C.median(lim))]
        for name in PART1:
            ts = [t[i] for t in times[name]]
            ratio = C.median([t / r for t, r in zip(ts, lim, strict=True)])
            row.append(f"{C.fmt_time(C.median(ts))} ({ratio:.2f}×)")
        row.append(f"±{max(C.spread([t[i] for t in v]) for v in times.values()) / 2:.0%}")
        rows.append(row)
    C.print_table(
        f"Part 1: N = {args.n:,}, D = {args.dim}, {args.threads} threads, float32, forward + backward, "
        f"median of {args.repeats} interleaved rounds (ratio to the matmul limit)",
        ["clock", "matmul limit", *PART1, "noise"],
        rows,
    )
    compiles = ", ".join(
        f"{name} {C.fmt_time(first[name][0])} (a warm step {C.fmt_time(C.median([t[0] for t in times[name]]))})"
        for name in PART1
        if "compiled" in name
    )
    print(f"\nfirst call, wall (pays the compile): {compiles}")
    if args.profile:
        profile({name: fns[name] for name in PART1})


#: Operators that are GEMMs, for the profile's matmul share.
GEMMS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm")


def profile(fns: dict[str, Callable[[], object]], steps: int = 3) -> None:
    """Per function of part 1: the GEMMs' share of its operators' CPU time and its five costliest other operators."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    print(f"\nprofile ({steps} steps each, after the timing; CPU time of operators, torch.profiler):")
    for name, fn in fns.items():
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                fn()
        ops = [e for e in prof.key_averages() if e.key.startswith(("aten::", "Torch-Compiled", "## Call"))]
        total = sum(e.self_cpu_time_total for e in ops) or 1.0
        gemm = sum(e.self_cpu_time_total for e in ops if e.key in GEMMS)
        rest = sorted((e for e in ops if e.key not in GEMMS), key=lambda e: -e.self_cpu_time_total)[:5]
        others = ", ".join(
            f"{'compiled pass' if e.key.startswith('## Call') else e.key} {e.self_cpu_time_total / total:.0%}"
            for e in rest
        )
        print(f"- {name}: GEMMs {gemm / total:.0%}; {others}")


def child(n: int, chunk: str, d: int, steps: int) -> None:
    """Tiled InfoNCE at size N with tile side ``chunk`` ("auto" or an int): JSON of its times, limit, peak RSS."""
    a, p = C.make_inputs(n, d)
    calibration = 0.0
    if chunk == "auto":
        t0 = time.perf_counter()
        side = tiled.plan_chunk_size(n, n, 4, None, keeps_logits=False, like=p.detach())  # measures once
        calibration = time.perf_counter() - t0
        chunk_size = None
    else:
        side = chunk_size = int(chunk)
    stripe = None if side is None else tiled.stripe_rows(side, n)
    stripe = None if stripe is None else min(stripe, n)

    def step() -> None:
        a.grad = None
        p.grad = None
        info_nce(a, p, temperature=TEMPERATURE, chunk_size=chunk_size).backward()

    walls, cpus = [], []
    for _ in range(steps):
        w, c = _both_clocks(step)
        walls.append(w)
        cpus.append(c)
    peak = C.peak_rss_bytes()
    limit_fn, scale = C.matmul_limit_fn(n, d)
    limit_fn()  # warm-up stripe
    lim = [_both_clocks(limit_fn) for _ in range(3)]
    out = {
        "side": side,
        "stripe_rows": stripe,
        "calibration": calibration,
        "wall": walls,
        "cpu": cpus,
        "limit_wall": C.median([t[0] for t in lim]) * scale,
        "limit_cpu": C.median([t[1] for t in lim]) * scale,
        "peak": peak,
    }
    print(json.dumps(out))


def part2(args: argparse.Namespace) -> None:
    """Run part 2's children and print its table."""
    here = str(Path(__file__).resolve())
    rows = []
    for chunk in ["auto", *map(str, args.fixed_chunks)]:
        argv = [here, "--child", str(args.big_n), "--child-chunk", chunk, "--dim", str(args.dim)]
        argv += ["--threads", str(args.threads), "--big-steps", str(args.big_steps)]
        res = C.run_child(argv)
        if "error" in res:
            rows.append([chunk, res["error"], "", "", "", "", ""])
            continue
        side = "dense blocks" if res["side"] is None else f"{res['side']:,} ({res['stripe_rows']} rows)"
        name = f"measured: {side}" if chunk == "auto" else side
        rows.append(
            [
                name,
                f"{res['calibration']:.2f} s" if chunk == "auto" else "—",
                C.fmt_time(res["limit_wall"]),
                f"{C.fmt_time(res['wall'][-1])} ({res['wall'][-1] / res['limit_wall']:.2f}×)",
                f"{C.fmt_time(res['cpu'][-1])} ({res['cpu'][-1] / res['limit_cpu']:.2f}×)",
                C.fmt_time(res["wall"][0]),
                C.fmt_bytes(res["peak"]),
            ]
        )
    C.print_table(
        f"Part 2: tiled InfoNCE (mean), N = {args.big_n:,}, D = {args.dim}, {args.threads} threads, float32, "
        f"step {args.big_steps} of {args.big_steps} (ratio to the matmul limit of the same child)",
        ["tile side", "calibration", "matmul limit (wall)", "wall", "CPU", "first step (wall)", "peak RSS"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    """Run both parts (or a child of part 2) and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="N of part 1")
    ap.add_argument("--big-n", type=int, default=65536, help="N of part 2")
    ap.add_argument("--dim", type=int, default=128, help="embedding dimension D")
    ap.add_argument("--repeats", type=int, default=15, help="timed rounds of part 1")
    ap.add_argument("--big-steps", type=int, default=2, help="steps per child of part 2 (the last is reported)")
    ap.add_argument("--fixed-chunks", type=int, nargs="*", default=[2048, 4096], help="fixed tile sides of part 2")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument("--skip", choices=("part1", "part2"), help="leave one part out")
    ap.add_argument("--profile", action="store_true", help="after part 1's timing, profile its functions")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-chunk", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("n", "big_n", "dim", "repeats", "big_steps", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    C.set_threads(args.threads)
    if args.child:
        child(args.child, args.child_chunk, args.dim, args.big_steps)
        return 0
    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/kernel_targets.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    t0 = time.perf_counter()
    if args.skip != "part1":
        part1(args)
    if args.skip != "part2":
        part2(args)
    print(
        f"\n({time.perf_counter() - t0:.0f} s in all.) matmul limit: the three GEMMs of an exact forward + backward "
        "(S = QKᵀ, ∂Q = GK, ∂K = GᵀQ) into kept buffers (in 2,048-row stripes above 2^27 logits). noise: half "
        "the largest (max − min)/median over the rounds of part 1."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
