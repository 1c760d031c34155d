"""Under which conditions does ``fit`` reproduce itself bit for bit? Thread count, heap layout, CPU code path.

Each run is a fresh process that trains an MLP with InfoNCE for 8 AdamW steps (seed 3, gradient
clipping) on batches drawn from ``step_generator`` and prints the SHA-256 of the final parameters.
Runs differ in one condition at a time:

- ``torch.set_num_threads`` 1 or 2;
- the heap: as the process starts, or after allocating blocks of odd sizes and freeing every other
  one (the run's tensors land at other addresses and alignments);
- the CPU code path, to stand in for another machine: ``ATEN_CPU_CAPABILITY=avx2`` (ATen's vectorised
  kernels at AVX2 width instead of AVX-512), ``MKL_CBWR=AVX2`` (MKL's AVX2 GEMM kernels),
  ``ONEDNN_MAX_CPU_ISA=AVX2``, or all three.

Three sizes (batch × input dim, hidden width): 32 × 6, 16 (the trainer tests' tiny run), 512 × 64,
256, and 4096 × 256, 1024. Runs with the same digest as the first run of their size are bit-identical.

Usage:
    python benchmarks/determinism.py            # everything (a few minutes on 2 cores)
    python benchmarks/determinism.py --quick    # the two smaller sizes only
    python benchmarks/determinism.py --child THREADS FRAGMENT N D H   # one run (used internally)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

SIZES = [(32, 6, 16), (512, 64, 256), (4096, 256, 1024)]
ISA_ENVS = {
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
    "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "all three": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def child(threads: int, fragment: bool, n: int, d: int, h: int) -> str:
    """Train once in this process and return the hex SHA-256 of the final parameters."""
    import torch
    import torch.nn.functional as F

    from contrastlab.models import MLP
    from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator

    torch.set_num_threads(threads)
    kept = []
    if fragment:
        g = torch.Generator().manual_seed(123)
        blocks = [torch.rand(k, generator=g) for k in (1, 3, 7, 31, 1021, 4099, 65537, 262147, 1048583)]
        kept = blocks[::2]

    def batch_at(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = step_generator(11, step)
        x = torch.randn(n, d, generator=g)
        return x, x + 0.1 * torch.randn(n, d, generator=g)

    def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        a = F.normalize(model(batch[0]), dim=1)
        p = F.normalize(model(batch[1]), dim=1)
        return F.cross_entropy(a @ p.T / 0.2, torch.arange(n))

    torch.manual_seed(0)
    cfg = TrainConfig(
        steps=8, seed=3, log_every=1, progress=False, optim=OptimConfig(name="adamw", lr=3e-3, grad_clip=2.0)
    )
    result = fit(MLP(d, [h], 32), loss_fn, batch_at, cfg)
    digest = hashlib.sha256()
    for value in result.model.state_dict().values():
        digest.update(value.numpy().tobytes())
    del kept
    return digest.hexdigest()


def _run(threads: int, fragment: bool, size: tuple[int, int, int], extra_env: dict[str, str]) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), **extra_env}
    argv = [sys.executable, __file__, "--child", str(threads), str(int(fragment)), *map(str, size)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    return out.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    """Print one row per run: size, condition, digest prefix, and whether it equals the size's first run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two smaller sizes")
    ap.add_argument("--child", nargs=5, type=int, metavar=("THREADS", "FRAGMENT", "N", "D", "H"))
    args = ap.parse_args(argv)
    if args.child:
        threads, fragment, n, d, h = args.child
        print(child(threads, bool(fragment), n, d, h))
        return 0
    print(f"{'batch x dim, hidden':<22} {'condition':<40} {'digest':<18} same as first")
    for size in SIZES[:2] if args.quick else SIZES:
        runs = [(f"{t} thread(s), {'fragmented' if f else 'fresh'} heap", t, f, {}) for t in (1, 2) for f in (0, 1)]
        if size != SIZES[-1]:
            runs += [(f"1 thread, {name}", 1, 0, env) for name, env in ISA_ENVS.items()]
        first = None
        for label, threads, fragment, env in runs:
            digest = _run(threads, bool(fragment), size, env)
            first = first or digest
            name = f"{size[0]} x {size[1]}, {size[2]}"
            print(f"{name:<22} {label:<40} {digest[:16]:<18} {'yes' if digest == first else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
