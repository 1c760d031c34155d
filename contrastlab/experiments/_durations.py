"""How long a run should take: its duration as recorded by an earlier run of the same thing.

:func:`recorded_seconds` looks, in order, at ``results.json`` in the run's own folder (a rerun into
the same place, as ``make demo`` does), then at sibling folders named ``NAME-*`` (the default
``runs/NAME-TIMESTAMP`` of :func:`contrastlab.io.default_out_dir`), and takes the ``runtime_s`` of the
newest one whose name, ``quick`` flag and resolved config equal this run's. Failing that, the
``--quick`` runs of the demo fall back to :data:`REFERENCE_QUICK_S`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["REFERENCE_QUICK_S", "recorded_seconds"]

REFERENCE_QUICK_S: dict[str, float] = {
    "augmentation-diversity": 326.6,
    "weince-vs-infonce": 155.1,
    "text-finetune": 127.7,
    "constraint-ratio": 68.1,
    "norms-vs-uncertainty": 50.0,
    "norm-calibration": 33.4,
    "identifiability-table": 80.2,
    "norm-dynamics": 19.4,
    "k-gap": 6.2,
    "generalisation-vs-k": 10.0,
    "continuity-bound": 4.0,
}
"""Wall seconds of each experiment's ``--quick`` run inside ``make demo`` (two at a time, one torch thread
each) on the 2-core reference machine with nothing else running: the demo's printed table of 2026-12-02."""

_MAX_SIBLINGS = 50  # newest sibling folders read; a runs/ folder of thousands of runs is not scanned whole


def _matches(path: Path, name: str, config: Mapping[str, Any], quick: bool) -> float | None:
    from contrastlab.io import CorruptFileError, read_json_verified, to_jsonable

    try:
        res = read_json_verified(path)
    except (OSError, ValueError, CorruptFileError):
        return None
    runtime = res.get("runtime_s")
    if (
        res.get("name") != name
        or res.get("config") != json.loads(json.dumps(to_jsonable(dict(config))))
        or bool(res.get("quick")) != quick
    ):
        return None
    if isinstance(runtime, bool) or not isinstance(runtime, (int, float)) or not runtime >= 0:
        return None
    return float(runtime)


def recorded_seconds(
    name: str, config: Mapping[str, Any], out_dir: Path, *, quick: bool, reference: bool = False
) -> tuple[float | None, str]:
    """The recorded duration of a run like this one, and where it was found.

    Args:
        name: the run's ``name`` in its ``results.json`` (an experiment's name).
        config: the run's resolved config as written to ``results.json`` (``to_dict`` of the dataclass).
        out_dir: the folder the run writes into.
        quick: whether it is a ``--quick`` run.
        reference: fall back to :data:`REFERENCE_QUICK_S` (only right for an experiment's own ``QUICK``).

    Returns:
        ``(seconds, "where from")``, or ``(None, "")`` when nothing was recorded.
    """
    own = out_dir / "results.json"
    seconds = _matches(own, name, config, quick) if own.is_file() else None
    if seconds is not None:
        return seconds, f"the last run in {out_dir}"
    parent = out_dir.parent
    if parent.is_dir():
        try:
            siblings = [p for p in parent.glob(f"{name}-*/results.json") if p.parent != out_dir]
            siblings.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            siblings = []
        for p in siblings[:_MAX_SIBLINGS]:
            seconds = _matches(p, name, config, quick)
            if seconds is not None:
                return seconds, f"the run in {p.parent}"
    if reference and quick and name in REFERENCE_QUICK_S:
        return REFERENCE_QUICK_S[name], "the reference 2-core machine"
    return None, ""
