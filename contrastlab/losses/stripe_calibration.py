"""The tile side of the streamed InfoNCE sweep, chosen from the measured throughput of its stripe GEMMs.

A mean or sum of in-batch InfoNCE / NT-Xent beyond the dense block size runs in full-width stripes of
``c² // M`` rows for a tile side ``c`` (:func:`contrastlab.losses.tiled.stripe_rows`): per stripe of r rows
the three GEMMs of forward + backward, ``S = Q_r Kᵀ`` (r × M), ``∂Q_r = G K`` and ``∂K += Gᵀ Q_r``. How fast
they run depends on r, on the width M (the stripe and ∂K must stay in cache; ∂K is re-read once per
stripe), on D, the dtype and the machine: on the 2-core benchmark machine at D = 128, M = 4,096 every
height from 64 to 4,096 rows ran alike, while at M = 65,536 stripes of 64 rows (c = 2,048) took 1.22× the
time of stripes of 2,048 rows. A constant tile side is right for one of these and wrong for the others,
so the tile side is measured instead:

* :func:`measure_chunk_size` times the three GEMMs of one stripe for each candidate tile side
  (:data:`CANDIDATE_CHUNKS`; sides whose stripes would hold fewer than 64 rows are skipped), takes the
  throughput in rows per second (the fastest of ``repeats`` timings after one untimed call that touches
  the buffers), and returns the **smallest** side within :data:`TOLERANCE` of the best throughput:
  memory is one stripe, c² elements, so a larger side is taken only when it is measurably faster.
  Given the timings the choice is deterministic (:func:`choose_chunk_size`, a pure function).
* :func:`calibrated_chunk_size` measures once per (device, dtype, D, width bucket) and process and
  reuses the answer; the width bucket is the power of two at or above M (a training run's fixed batch
  measures once).

The planner (:func:`contrastlab.losses.tiled.plan_chunk_size`) asks only where the dense 16 MiB block
would hold fewer than 256 rows (M > 16,384 in float32), where one forward + backward takes seconds: the
calibration's cost (at M = 65,536 and D = 128 about 3·(64 + 256 + 1,024) rows of three GEMMs, of the
order of one second on the benchmark machine) is then paid once by the first such call. An explicit
``chunk_size`` always wins and never calibrates. Because the choice depends on timings, two processes
can choose different sides: the results then agree to rounding (the stripes sum ∂K in another order);
a run that must be bit-reproducible passes ``chunk_size``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch

__all__ = [
    "CANDIDATE_CHUNKS",
    "TOLERANCE",
    "calibrated_chunk_size",
    "choose_chunk_size",
    "clear_calibration",
    "measure_chunk_size",
]

#: Tile sides timed by the calibration. A stripe holds at most c² elements (256 MiB in float32 at 8,192),
#: the memory the tiled loss then needs besides O((N + M)·D); 2,048 and 4,096 are the sides measured
#: before (docs/performance.md), 8,192 the height of the matmul limit's stripes at M = 32,768.
CANDIDATE_CHUNKS = (2048, 4096, 8192)
#: The smallest side whose throughput is at least (1 − TOLERANCE) × the best is chosen: 10%, about the
#: scatter of repeated timings of one stripe on a quiet 2-core machine, so that a side is not taken for a
#: difference the timing cannot resolve.
TOLERANCE = 0.10
# A stripe of fewer rows makes thin GEMMs: the planner then tiles in squares (``tiled._MIN_STREAM_ROWS``).
_MIN_ROWS = 64

_CHOICES: dict[tuple[str, int | None, torch.dtype, int, int], int] = {}


def _check_candidates(candidates: Sequence[int]) -> tuple[int, ...]:
    out = tuple(candidates)
    if not out:
        raise ValueError("candidates must hold at least one tile side")
    for c in out:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"candidates must be ints >= 1, got {c!r}")
    return tuple(sorted(set(out)))


def _check_tolerance(tolerance: float) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    return float(tolerance)


def choose_chunk_size(rows_per_second: dict[int, float], tolerance: float = TOLERANCE) -> int:
    """The smallest tile side whose stripe throughput is within ``tolerance`` of the best.

    Args:
        rows_per_second: measured throughput (stripe rows per second of the three GEMMs) per tile side.
        tolerance: the fraction of the best throughput a side may lose and still be chosen.

    Raises:
        ValueError: no measurement, a throughput that is not a positive finite number, a bad tolerance.
    """
    tolerance = _check_tolerance(tolerance)
    if not rows_per_second:
        raise ValueError("rows_per_second must hold at least one measurement")
    for c, v in rows_per_second.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"rows_per_second[{c}] must be a positive finite number, got {v!r}")
    best = max(rows_per_second.values())
    return min(c for c, v in rows_per_second.items() if v >= (1.0 - tolerance) * best)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stripe_seconds(
    rows: int, n_cols: int, dim: int, dtype: torch.dtype, device: torch.device, timer: Callable[[], float], repeats: int
) -> float:
    """The fastest of ``repeats`` timings of one stripe's three GEMMs, into buffers allocated once."""
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(rows, dim, generator=g, dtype=dtype, device=device)
    k = torch.randn(n_cols, dim, generator=g, dtype=dtype, device=device) / math.sqrt(dim)
    s = torch.empty(rows, n_cols, dtype=dtype, device=device)
    dq = torch.empty(rows, dim, dtype=dtype, device=device)
    dk = torch.zeros(n_cols, dim, dtype=dtype, device=device)

    def run() -> None:
        torch.mm(q, k.T, out=s)  # the stripe's logits
        torch.mm(s, k, out=dq)  # ∂Q of its rows
        dk.addmm_(s.T, q)  # ∂K, accumulated over the stripes

    run()  # first touch of the buffers, untimed
    _sync(device)
    best = math.inf
    for _ in range(repeats):
        t0 = timer()
        run()
        _sync(device)
        best = min(best, timer() - t0)
    return best


def measure_chunk_size(
    n_cols: int,
    dim: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    *,
    candidates: Sequence[int] = CANDIDATE_CHUNKS,
    tolerance: float = TOLERANCE,
    repeats: int = 2,
    min_rows: int = _MIN_ROWS,
    timer: Callable[[], float] = time.perf_counter,
) -> int:
    """Time one stripe per candidate tile side at width ``n_cols`` and choose the side (see the module docstring).

    Args:
        n_cols: the width M of the stripes (candidates per row).
        dim: the embedding dimension D.
        dtype: the compute dtype.
        device: where the GEMMs run.
        candidates: tile sides to time; sides whose stripes would hold fewer than ``min_rows`` rows are
            skipped, and if every side is, the largest is returned untimed (the loss then tiles in squares).
        tolerance: passed to :func:`choose_chunk_size`.
        repeats: timed calls per side (the fastest counts), after one untimed call.
        min_rows: the fewest rows of a stripe the loss streams (64, as the planner).
        timer: the clock, in seconds (injectable for tests).

    Returns:
        The chosen tile side.

    Raises:
        ValueError: ``n_cols``, ``dim``, ``repeats`` or ``min_rows`` < 1, or bad ``candidates`` / ``tolerance``.
    """
    for name, v in (("n_cols", n_cols), ("dim", dim), ("repeats", repeats), ("min_rows", min_rows)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    sides = _check_candidates(candidates)
    tolerance = _check_tolerance(tolerance)
    dev = torch.device(device)
    speeds: dict[int, float] = {}
    for c in sides:
        rows = c * c // n_cols
        if rows < min_rows:
            continue
        seconds = _stripe_seconds(rows, n_cols, dim, dtype, dev, timer, repeats)
        speeds[c] = rows / max(seconds, 1e-12)
    if not speeds:
        return sides[-1]
    return choose_chunk_size(speeds, tolerance)


def calibrated_chunk_size(n_cols: int, dim: int, dtype: torch.dtype, device: torch.device | str) -> int:
    """:func:`measure_chunk_size` once per (device, dtype, D, power of two of M) in this process, then reused."""
    dev = torch.device(device)
    key = (dev.type, dev.index, dtype, dim, max(1, n_cols - 1).bit_length())
    if key not in _CHOICES:
        _CHOICES[key] = measure_chunk_size(n_cols, dim, dtype, dev)
    return _CHOICES[key]


def clear_calibration() -> None:
    """Forget every calibrated tile side (the next call that needs one measures again)."""
    _CHOICES.clear()
