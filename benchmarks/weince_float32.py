"""WEINCE's float32 statistics against float64 on the same inputs, near and far from the endpoint s = 1.

Clustered views (4 unit centres, Gaussian spread σ per coordinate) make every anchor's hardest
negatives crowd s = 1 as σ shrinks. For each σ and seed it prints the largest deviation of float32 λ,
ΔAIC and β̂ (relative) from the float64 computation on the same, float32-representable inputs, and
the smallest ρ = 1 − s. ``--threshold 0`` disables the float64 recomputation of crowded rows (the
behaviour before it existed).

    python benchmarks/weince_float32.py [--threshold 0.25] [--n 128] [--d 128]
"""

from __future__ import annotations

import argparse
import sys

import torch

from contrastlab.losses import weince


def clustered(n: int, d: int, clusters: int, sigma: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 views ``(n, d)`` around ``clusters`` unit centres, spread ``sigma`` per coordinate."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(clusters, d, generator=g, dtype=torch.float64), dim=1)
    c = centres[torch.arange(n) % clusters]
    za = c + sigma * torch.randn(n, d, generator=g, dtype=torch.float64)
    zb = c + sigma * torch.randn(n, d, generator=g, dtype=torch.float64)
    return za.float(), zb.float()


def main(argv: list[str] | None = None) -> None:
    """Print one line per (σ, seed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=None, help="override ENDPOINT_SHORTFALL")
    parser.add_argument("--n", type=int, default=128, help="pairs N (2N views)")
    parser.add_argument("--d", type=int, default=128)
    args = parser.parse_args(argv)
    module = sys.modules[weince.__module__]
    if args.threshold is not None:
        module.ENDPOINT_SHORTFALL = args.threshold  # type: ignore[attr-defined]
    print(f"ENDPOINT_SHORTFALL = {module.ENDPOINT_SHORTFALL}")  # type: ignore[attr-defined]
    print("sigma seed   min_rho    |dlam|    |dAIC|  |dbeta|/beta")
    for sigma in (0.001, 0.003, 0.01, 0.06, 0.1, 0.3):
        for seed in range(3):
            za, zb = clustered(args.n, args.d, 4, sigma, seed)
            t32 = weince(za, zb, return_stats=True)[1].tail
            t64 = weince(za.double(), zb.double(), return_stats=True)[1].tail
            dlam = float((t32.lam - t64.lam).abs().max())
            daic = float((t32.delta_aic - t64.delta_aic).abs().max())
            dbeta = float(((t32.beta_hat - t64.beta_hat).abs() / t64.beta_hat.abs().clamp_min(1e-12)).max())
            print(f"{sigma:5} {seed:4} {float(t64.rho.min()):9.2e} {dlam:9.2e} {daic:9.2e} {dbeta:9.2e}")


if __name__ == "__main__":
    main()
