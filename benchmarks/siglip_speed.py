"""Forward + backward time of SigLIP (Zhai et al. 2023, arXiv 2303.15343) against the matmul limit and its peers.

For each N the script times, in one process and interleaved (A B C … A B C …), the three GEMMs an exact
forward + backward must do (the *matmul limit*, into kept buffers: ``_common.matmul_limit_fn``),
contrastlab's streamed ``siglip`` (learnable τ and b, as in training), open_clip's ``SigLipLoss`` (on
normalised features, its documented input) and the paper's Algorithm 1 written in plain PyTorch, and prints
one markdown table: median time and its ratio to the limit. The machine may be shared: ratios within one
run are what to compare; the table says how much the repeats varied.

Usage:
    python benchmarks/siglip_speed.py                         # N = 1,024 and 4,096, D = 128, 2 threads
    python benchmarks/siglip_speed.py --sizes 16384 --repeats 3 --impls contrastlab
    python benchmarks/siglip_speed.py --sizes 4096 --impls contrastlab "contrastlab compiled"

``contrastlab compiled`` is ``siglip(..., compiled=True)``, the block's element-wise pass compiled by
``torch.compile`` (its compile is paid by the warm-up round, outside the timing).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

from contrastlab.losses import siglip  # noqa: E402

IMPLS = ("contrastlab", "contrastlab compiled", "open_clip SigLipLoss", "plain PyTorch")
#: The compiled pass (``siglip(..., compiled=True)``) is timed only when asked for: its warm-up compiles.
DEFAULT_IMPLS = tuple(i for i in IMPLS if i != "contrastlab compiled")
REPEATS = {1024: 15, 4096: 7, 16384: 3}


def _open_clip_loss() -> object | None:
    """open_clip's ``loss.py`` loaded from its file (its package ``__init__`` needs torchvision)."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "loss.py"
    file_spec = importlib.util.spec_from_file_location("_bench_open_clip_loss", path)
    assert file_spec is not None and file_spec.loader is not None
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module.SigLipLoss()


def _plain(a: torch.Tensor, p: torch.Tensor, t: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 of the paper, vectorised: the N × N logits and labels, −Σ log σ / N."""
    logits = t * F.normalize(a, dim=1) @ F.normalize(p, dim=1).T + b
    labels = 2 * torch.eye(a.shape[0]) - 1
    return -F.logsigmoid(labels * logits).sum() / a.shape[0]


def make_step(impl: str, a: torch.Tensor, p: torch.Tensor) -> Callable[[], None] | None:
    """One forward + backward of ``impl`` with fresh gradients on the inputs, t = 10 and b = −10 learnable."""
    log_t = torch.tensor(math.log(10.0), requires_grad=True)
    b = torch.tensor(-10.0, requires_grad=True)
    x, y = a.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
    if impl.startswith("contrastlab"):
        compiled = impl == "contrastlab compiled"

        def loss() -> torch.Tensor:
            return siglip(x, y, temperature=torch.exp(-log_t), bias=b, compiled=compiled)

    elif impl == "open_clip SigLipLoss":
        peer = _open_clip_loss()
        if peer is None:
            return None

        def loss() -> torch.Tensor:
            return peer(F.normalize(x, dim=1), F.normalize(y, dim=1), log_t.exp(), b)  # type: ignore[operator]

    else:

        def loss() -> torch.Tensor:
            return _plain(x, y, log_t.exp(), b)

    def step() -> None:
        for v in (x, y, log_t, b):
            v.grad = None
        loss().backward()

    return step


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=0, help="timed rounds per size (0: 15 / 7 / 3 by size)")
    ap.add_argument(
        "--clock", choices=tuple(C.CLOCKS), default="wall", help="wall time, or process CPU time (a shared machine)"
    )
    ap.add_argument("--threads", type=int, default=C.DEFAULT_THREADS)
    ap.add_argument("--impls", nargs="+", default=list(DEFAULT_IMPLS), choices=IMPLS)
    args = ap.parse_args(argv)
    C.set_threads(args.threads)
    rows = []
    for n in args.sizes:
        a, p = C.make_inputs(n, args.dim)
        lim_fn, scale = C.matmul_limit_fn(n, args.dim)
        fns: dict[str, Callable[[], object]] = {"limit": lim_fn}
        for impl in args.impls:
            step = make_step(impl, a, p)
            if step is not None:
                fns[impl] = step
        repeats = args.repeats or REPEATS.get(n, 3)
        times = C.interleaved_medians(fns, repeats, warmup=1, clock=args.clock)
        rows.append(C.ratio_row(n, times, scale, args.impls, repeats))
    C.print_table(
        f"SigLIP forward + backward, D = {args.dim}, {args.threads} threads, {args.clock} time, float32 — {C.machine()} "
        "(ratio to the matmul limit)",
        ["N", "matmul limit", *args.impls, "noise"],
        rows,
    )
    print(
        "\nmatmul limit: the three GEMMs of an exact forward + backward (L = QKᵀ, ∂Q = GK, ∂K = GᵀQ) into kept "
        "buffers, timed interleaved with the losses; ratio: median over rounds of time / limit in the same round. "
        "noise: half the largest (max − min)/median over the repeats."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
