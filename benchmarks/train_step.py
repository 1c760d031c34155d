"""Time per training step of contrastlab.train.fit against a minimal hand-written PyTorch loop.

Both do the same work: the same MLP encoder, InfoNCE with in-batch negatives, the same precomputed
batch, Adam at a constant learning rate. The hand-written loop is the floor (zero_grad, forward,
loss, backward, step); fit adds the schedule, autocast/grad-scaler switches, the running loss sum,
metrics rows and signal handling. Runs alternate (hand, fit, hand, fit, ...) and the median over
repeats is reported, so that load from other processes hits both alike. Target: fit ≤ 1.1× hand.

    python benchmarks/train_step.py                      # CPU, 1 thread
    python benchmarks/train_step.py --device cuda --precision bf16 --batch 4096
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext

import torch

from contrastlab.losses import info_nce
from contrastlab.models import MLP
from contrastlab.train import OptimConfig, TrainConfig, fit


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hand_loop(
    model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], steps: int, lr: float, precision: str
) -> None:
    """The minimal loop: what anyone would write by hand for the same training."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    device = next(model.parameters()).device
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    x, y = batch
    n = x.shape[0]
    for _ in range(steps):
        with torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext():
            a, p = model(torch.cat([x, y])).split(n)
            loss = info_nce(a, p, temperature=0.1).float()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def fit_loop(
    model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], steps: int, lr: float, precision: str
) -> None:
    """The same training through contrastlab.train.fit (metrics rows every 50 steps, no out_dir)."""
    n = batch[0].shape[0]

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        a, p = m(torch.cat(b)).split(n)
        return info_nce(a, p, temperature=0.1)

    device = str(next(model.parameters()).device)
    cfg = TrainConfig(
        steps=steps, device=device, precision=precision, log_every=50, progress=False, optim=OptimConfig(lr=lr)
    )  # type: ignore[arg-type]
    fit(model, loss_fn, lambda step: batch, cfg)


def time_per_step(
    run: Callable[..., None], make_model: Callable[[], torch.nn.Module], batch: tuple, steps: int, precision: str
) -> float:
    """Seconds per step of one run (a fresh model; the first steps are a warm-up and not timed)."""
    device = batch[0].device
    model = make_model()
    run(model, batch, 5, 1e-3, precision)  # warm-up: allocator, kernels, lazy imports
    model = make_model()
    _sync(device)
    t0 = time.perf_counter()
    run(model, batch, steps, 1e-3, precision)
    _sync(device)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--in-dim", type=int, default=10)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--out-dim", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, args.in_dim, generator=g)
    batch = (x.to(device), (x + 0.1 * torch.randn(x.shape, generator=g)).to(device))

    def make_model() -> torch.nn.Module:
        torch.manual_seed(0)
        return MLP(args.in_dim, args.hidden, args.out_dim).to(device)

    hand, ours = [], []
    for _ in range(args.repeats):
        hand.append(time_per_step(hand_loop, make_model, batch, args.steps, args.precision))
        ours.append(time_per_step(fit_loop, make_model, batch, args.steps, args.precision))
    h, f = statistics.median(hand), statistics.median(ours)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} thread(s)"
    print(
        f"device {name}; precision {args.precision}; batch {args.batch}; MLP {args.in_dim}->{args.hidden}->"
        f"{args.out_dim}; InfoNCE in-batch; Adam; {args.steps} steps x {args.repeats} repeats (median)"
    )
    print("| loop | ms/step | steps/s | ratio |\n|---|---|---|---|")
    print(f"| hand-written | {1e3 * h:.3f} | {1 / h:.1f} | 1.00 |")
    print(f"| contrastlab.train.fit | {1e3 * f:.3f} | {1 / f:.1f} | {f / h:.3f} |")
    print(f"fit / hand = {f / h:.3f} (target <= 1.10): {'OK' if f / h <= 1.10 else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
