"""Peak memory and step time of a contrastive step on a real encoder, with and without gradient caching.

Two encoders (``--encoder``):

* ``resnet18``: the CIFAR ResNet-18 of ``contrastlab.models`` (``--width`` channels in the first stage;
  64 is the paper's, 16 keeps CPU runs short) with its BatchNorm layers frozen (eval mode, as in a
  fine-tune: row-independent, which gradient caching needs), on B anchor and B positive random
  32×32 images;
* ``minilm``: the bundled all-MiniLM-L6-v2 (``benchmarks/_minilm.py``; training mode, dropout on, as
  ``fit`` runs it) on the first B train pairs of the docstring code corpus (query, ``def`` line), each
  text tokenised and padded to ``--seq-len`` tokens (the parent tokenises once and hands the pairs to
  the children in a temporary ``.npy``).

One step embeds the B anchors and B positives (2B rows), computes in-batch InfoNCE (τ = 0.1) and
back-propagates to every parameter:

* ``plain``: one forward over the 2B rows with a graph, then backward (activations of all 2B rows);
* ``cached``: :func:`contrastlab.train.cached_backward` with ``--minibatch`` rows per forward
  (activations of one mini-batch, one extra forward pass).

Peak memory: each (mode, B) runs in a fresh process that builds the model and the batch, records its
resident set size (the baseline), runs two steps and reports its peak resident set size (``VmHWM``);
``--max-plain-rows`` skips the uncached run where it would need more memory than the machine can
spare. Time: one more process per B runs plain and cached steps interleaved (one warm-up round, then
``--repeats`` rounds, or fewer once ``--time-budget`` seconds have passed; interleaving spreads a
shared machine's load over both) and reports the medians of the wall time and of the process CPU time
(the work done: robust to waiting for a core on a loaded machine). The parent prints one markdown table.

Usage:
    python benchmarks/grad_cache_memory.py                          # B = 64 … 1,024
    python benchmarks/grad_cache_memory.py --batches 64 256 --width 8 --minibatch 32
    python benchmarks/grad_cache_memory.py --encoder minilm --seq-len 32 --batches 32 64 128 256 512 \
        --minibatch 64 --what memory --max-plain-rows 512
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import torch  # noqa: E402

BATCHES = (64, 128, 256, 512, 1024)
MODES = ("plain", "cached")


def setup(encoder: str, batch: int, width: int, data: str | None) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model (in the mode the step runs in) and a batch of ``batch`` (anchor, positive) pairs."""
    if encoder == "minilm":
        import _minilm

        pairs = _minilm.load_pairs(Path(str(data)))
        model, _ = _minilm.load_minilm(pairs.shape[-1])  # training mode: dropout on, as in fit
        return model, _minilm.batch_of(pairs, torch.arange(batch))
    from contrastlab.models import ResNet18

    model = ResNet18(3, 32, 128, width=width).eval()  # frozen BatchNorm statistics
    x = torch.rand(batch, 3, 32, 32)
    return model, (x, (x + 0.05 * torch.randn_like(x)).clamp(0, 1))


def child(mode: str, batch: int, args: argparse.Namespace) -> None:
    """Measure one configuration in this process and print a JSON line.

    ``mode`` is ``plain`` or ``cached`` (peak RSS of two steps) or ``time`` (interleaved medians).
    """
    from contrastlab.losses import info_nce
    from contrastlab.train import EmbeddingObjective, cached_backward

    torch.manual_seed(0)
    model, images = setup(args.encoder, batch, args.width, args.data)
    minibatch, repeats = args.minibatch, args.repeats
    objective = EmbeddingObjective(
        inputs=lambda b: torch.cat(b), loss=lambda e, b: info_nce(*e.split(b[0].shape[0]), temperature=0.1)
    )

    def plain() -> None:
        model.zero_grad(set_to_none=True)
        objective(model, images).backward()

    def cached() -> None:
        model.zero_grad(set_to_none=True)
        cached_backward(model, objective, images, minibatch)

    if mode == "time":
        # wall and process CPU time per step, interleaved after a warm-up round; on a shared machine the
        # CPU time of this (single-threaded) process is the work done, whatever the waits for a core
        steps = {"plain": plain, "cached": cached}
        for fn in steps.values():
            fn()
        wall: dict[str, list[float]] = {k: [] for k in steps}
        cpu: dict[str, list[float]] = {k: [] for k in steps}
        t_end = time.perf_counter() + (args.time_budget or float("inf"))
        for _ in range(repeats):
            if time.perf_counter() > t_end:  # fewer rounds rather than none (the table says how many)
                break
            for k, fn in steps.items():
                w0, c0 = time.perf_counter(), time.process_time()
                fn()
                wall[k].append(time.perf_counter() - w0)
                cpu[k].append(time.process_time() - c0)
        out = {k: statistics.median(v) for k, v in wall.items()} | {
            f"cpu_{k}": statistics.median(v) for k, v in cpu.items()
        }
        out |= {"spread": max(map(C.spread, wall.values())), "cpu_spread": max(map(C.spread, cpu.values()))}
        out |= {"rounds": len(wall["plain"])}
        print(json.dumps(out))
        return
    baseline = C.current_rss_bytes()
    step = plain if mode == "plain" else cached
    step()
    step()
    print(json.dumps({"peak": C.peak_rss_bytes(), "baseline": baseline}))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one configuration) and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", choices=("resnet18", "minilm"), default="resnet18", help="the encoder stepped")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES), help="pairs per step B (2B rows)")
    ap.add_argument("--width", type=int, default=16, help="ResNet-18 first-stage channels")
    ap.add_argument("--seq-len", type=int, default=32, help="MiniLM: tokens per text (max_seq_length, padded)")
    ap.add_argument("--minibatch", type=int, default=64, help="rows per forward pass when caching")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds per batch size (medians reported)")
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS, help="torch intra-op threads")
    ap.add_argument(
        "--time-budget", type=float, help="seconds after the warm-up round past which no new timed round starts"
    )
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per child")
    ap.add_argument("--what", choices=("both", "time", "memory"), default="both", help="skip the time or memory runs")
    ap.add_argument(
        "--max-plain-rows", type=int, help="skip the uncached memory run above this many rows (it would not fit)"
    )
    ap.add_argument("--child", nargs=2, metavar=("MODE", "B"), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)  # the MiniLM children's tokenised pairs
    args = ap.parse_args(argv)

    C.set_threads(args.threads)
    if args.child:
        child(args.child[0], int(args.child[1]), args)
        return 0

    print(f"machine: {C.machine()}")
    print(f"command: python benchmarks/grad_cache_memory.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--encoder", args.encoder, "--width", str(args.width), "--minibatch", str(args.minibatch),
                  "--repeats", str(args.repeats), "--threads", str(args.threads)]  # fmt: skip
        if args.time_budget is not None:
            common += ["--time-budget", str(args.time_budget)]
        if args.encoder == "minilm":
            import _minilm

            data = Path(tmp) / "pairs.npy"
            _minilm.save_pairs(data, _minilm.tokenised_pairs(_minilm.load_minilm(args.seq_len)[1], args.seq_len))
            common += ["--data", str(data)]
        rows = measure(args, common)
    if args.encoder == "minilm":
        what = f"all-MiniLM-L6-v2 (training mode, dropout on; {args.seq_len} tokens per text), code-corpus pairs"
    else:
        what = f"a CIFAR ResNet-18 (width {args.width}, frozen BN)"
    C.print_table(
        f"One InfoNCE step on {what}, {args.threads} threads: peak RSS "
        f"(increase over the process after building model and batch) and median step time, wall and process CPU "
        f"(interleaved; ± the larger spread (max − min)/median of the two); cached = "
        f"mini-batches of {args.minibatch} rows",
        [
            "B (pairs)",
            "rows",
            "peak RSS plain",
            "peak RSS cached",
            "step plain (wall / CPU)",
            "step cached (wall / CPU)",
            "cached / plain, wall",
            "cached / plain, CPU",
        ],
        rows,
    )
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


def measure(args: argparse.Namespace, common: list[str]) -> list[list[str]]:
    """One child per (mode, B); the table's rows."""
    here = str(Path(__file__).resolve())
    modes = {"both": (*MODES, "time"), "time": ("time",), "memory": MODES}[args.what]
    rows = []
    t_start = time.perf_counter()
    for b in args.batches:
        res = {}
        for mode in modes:
            if mode != "cached" and args.max_plain_rows is not None and 2 * b > args.max_plain_rows:
                res[mode] = {"error": f"not run (> {args.max_plain_rows:,} rows)"}
                continue
            res[mode] = C.run_child([here, "--child", mode, str(b), *common], timeout=args.timeout)
            print(f"  B = {b:,} {mode}: {res[mode]}", file=sys.stderr, flush=True)
        row = [f"{b:,}", f"{2 * b:,}"]
        for mode in MODES:
            r = res.get(mode, {"error": "—"})
            row.append(
                r["error"] if "error" in r else f"{C.fmt_bytes(r['peak'])} (+{C.fmt_bytes(r['peak'] - r['baseline'])})"
            )
        t = res.get("time", {"error": "—"})
        if "error" in t:
            row += [t["error"], "—", "—", "—"]
        else:
            row += [
                f"{C.fmt_time(t['plain'])} / {C.fmt_time(t['cpu_plain'])}",
                f"{C.fmt_time(t['cached'])} / {C.fmt_time(t['cpu_cached'])}",
                f"{t['cached'] / t['plain']:.2f}× (±{t['spread']:.0%})",
                f"{t['cpu_cached'] / t['cpu_plain']:.2f}× (±{t['cpu_spread']:.0%}), {t['rounds']} rounds",
            ]
        rows.append(row)
    print(f"total {time.perf_counter() - t_start:.0f} s", file=sys.stderr)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
