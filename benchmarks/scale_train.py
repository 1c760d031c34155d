"""What does ``contrastlab train --engine ray`` cost over ``torchrun``? Start-up and training, same job, same ranks.

One sphere job (an MLP on the 10-d sphere world, batch 256, checkpoints every 50 steps) trains three ways,
each a fresh process, one intra-op thread per rank:

- ``one process``: ``contrastlab train JOB``;
- ``torchrun``: ``torchrun --standalone --nproc_per_node=2 -m contrastlab train JOB``;
- ``ray``: ``contrastlab train JOB --engine ray --workers 2`` with an embedded Ray (started and stopped by
  the command: Ray's start-up, Ray Train's controller, the placement group, the workers, the process group).

For each: the command's wall time, the training time ``fit`` itself reports (``results.json``'s
``runtime_s``), and their difference, the start-up and shut-down around the training. The torchrun and Ray
runs must end with the same weights (checked; they are 2-rank gloo groups in both cases).

Usage:
    python benchmarks/scale_train.py                # 400 steps
    python benchmarks/scale_train.py --steps 20     # a quick check that everything runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = """
data: {{name: sphere, latent_dim: 10, mixing: mlp, batch_size: 256}}
encoder: {{hidden: [128, 128], out_dim: 10}}
loss: {{name: info_nce, temperature: 0.1}}
train: {{steps: {steps}, log_every: 50, checkpoint_every: 50, progress: false, optim: {{name: adam, lr: 0.001}}}}
eval: {{n: 1024}}
"""


def run(name: str, args: list[str], out: Path) -> tuple[float, float]:
    """Run one way; return (wall seconds, fit's seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args, "--out", str(out)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, float(json.loads((out / "results.json").read_text())["runtime_s"])


def main() -> int:
    """Train the job three ways and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from contrastlab.train.loop.checkpoint import load_checkpoint

    with tempfile.TemporaryDirectory(prefix="scale-train-") as tmp:
        base = Path(tmp)
        job = base / "job.yaml"
        job.write_text(JOB.format(steps=args.steps))
        train = ["-m", "contrastlab", "train", str(job), "--quiet"]
        ways = {
            "one process": train,
            "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *train],
            "ray": [*train, "--engine", "ray", "--workers", "2", "--max-failures", "0"],
        }
        print(f"sphere job, {args.steps} steps of batch 256; {os.cpu_count()} cores, torch {torch.__version__}")
        print(f"{'way':<12} {'wall s':>8} {'fit s':>8} {'around s':>9}")
        for name, argv in ways.items():
            wall, fit_s = run(name, argv, base / name.replace(" ", "-"))
            print(f"{name:<12} {wall:>8.1f} {fit_s:>8.1f} {wall - fit_s:>9.1f}", flush=True)
        a = load_checkpoint(base / "torchrun" / "checkpoint.pt")["model"]
        b = load_checkpoint(base / "ray" / "checkpoint.pt")["model"]
        worst = max(float((a[k] - b[k]).abs().max()) for k in a)
        print(f"torchrun vs ray: largest weight difference {worst:.3g}")
        return 0 if worst <= 1e-6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
