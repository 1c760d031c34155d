"""``compiled="auto"``: a one-time measured choice between a loss's eager block pass and its compiled one.

SigLIP, masked InfoNCE and WEINCE's streamed kernel have an optional block pass compiled by
``torch.compile`` (:mod:`contrastlab.losses.siglip_compiled`,
:mod:`contrastlab.losses.masked_ratio_compiled`, :mod:`contrastlab.losses.weince.compiled`); the eager
passes are the reference and the default. Whether the compiled pass is faster depends on the machine
(vector width, the cost of a transcendental against a pass over the last-level cache) and on the block's
shape, so no constant table decides it. A caller that passes ``compiled="auto"`` asks for a measurement
on its own machine, once per process and key (loss, device, dtype, block rows, width bucket, whether a
gradient is formed): the two passes run alternately on the loss's own first block, after one untimed call
of each (the compiled one's compiles), and the compiled pass is used where its median time is at least
:data:`MARGIN` below the eager one's. That first call pays the compile and about ``2·(1 + repeats)``
block passes; every later call with the same key reuses the answer. ``compiled=False`` (the default)
never compiles, ``True`` always uses the compiled pass.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Sequence

import torch

__all__ = ["MARGIN", "check_compiled", "clear_choices", "compiled_is_faster", "measured_choice"]

#: The compiled pass is chosen when its median time is at most (1 − MARGIN) × the eager one's: 5%, so that
#: a difference within the timing's scatter leaves the reference (eager) pass in place.
MARGIN = 0.05

_CHOICES: dict[Hashable, bool] = {}


def check_compiled(value: object) -> bool | str:
    """Validate ``compiled``: ``False``, ``True`` or ``"auto"``.

    Raises:
        TypeError: neither a bool nor a string.
        ValueError: a string other than ``"auto"``.
    """
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise TypeError(f"compiled must be True, False or 'auto', got {type(value).__name__}")
    if value != "auto":
        raise ValueError(f"compiled must be True, False or 'auto', got {value!r}")
    return value


def compiled_is_faster(eager: Sequence[float], compiled: Sequence[float], margin: float = MARGIN) -> bool:
    """Whether the median of the ``compiled`` timings is at most (1 − ``margin``) × the median of ``eager``.

    Raises:
        ValueError: no timings, or ``margin`` outside [0, 1).
    """
    if not eager or not compiled:
        raise ValueError("eager and compiled must each hold at least one timing")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin!r}")
    return statistics.median(compiled) <= (1.0 - margin) * statistics.median(eager)


def measured_choice(
    key: Hashable,
    make: Callable[[], tuple[Callable[[], object], Callable[[], object]]],
    *,
    device: torch.device | None = None,
    repeats: int = 5,
    timer: Callable[[], float] = time.perf_counter,
) -> bool:
    """``True`` to use the compiled pass for ``key``: measured on the first call, then remembered.

    Args:
        key: what the choice is valid for (loss, device, dtype, shape bucket, ...).
        make: builds ``(eager, compiled)``, two functions each running one block pass on the same data;
            called only when ``key`` has not been measured in this process.
        device: where they run; on a GPU each call is timed up to its end (the device synchronised).
        repeats: timed calls of each, alternating, after one untimed call of each.
        timer: the clock, in seconds (injectable for tests).
    """
    if key not in _CHOICES:
        eager, compiled = make()

        def run(fn: Callable[[], object]) -> None:
            fn()
            if device is not None and device.type == "cuda":
                torch.cuda.synchronize(device)

        run(eager)
        run(compiled)  # compiles, untimed
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):
            for fn, out in ((eager, times[0]), (compiled, times[1])):
                t0 = timer()
                run(fn)
                out.append(timer() - t0)
        _CHOICES[key] = compiled_is_faster(*times)
    return _CHOICES[key]


def clear_choices() -> None:
    """Forget every measured choice (the next ``compiled="auto"`` call measures again)."""
    _CHOICES.clear()
