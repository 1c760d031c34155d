"""Named experiments: one readable module per claim, discovered by file name, run by one runner.

An experiment ``k-gap`` lives in ``contrastlab/experiments/k_gap.py`` and defines a frozen
``Config`` dataclass (a docstring under every field), ``QUICK`` (the ``--quick`` setting) and
``run(config, out_dir) -> dict`` returning ``summary``, ``metrics``, ``tables`` and ``figures``
(see ``docs/contracts.md``). Adding one touches no shared file: :func:`list_experiments` lists the
modules of this package whose names do not start with ``_``.

:func:`run_experiment` resolves the config, writes ``config.json`` before running (so a failed run
still says what it ran) and ``results.json`` after, both atomically, adding the name, resolved
config, package version, runtime, timestamp and host.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib
import pkgutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from contrastlab.host import host_info
from contrastlab.io import default_out_dir

__all__ = [
    "list_experiments",
    "describe_experiments",
    "get_experiment",
    "resolve_config",
    "run_experiment",
    "default_out_dir",
    "validate_results",
    "host_info",
]

_PACKAGE = __name__


def list_experiments() -> list[str]:
    """Names of the registered experiments (module ``k_gap`` → ``"k-gap"``), sorted."""
    # __path__ (not this file's folder) so that a plugin or a test can extend the package's search path
    paths = list(sys.modules[_PACKAGE].__path__)
    return sorted({m.name.replace("_", "-") for m in pkgutil.iter_modules(paths) if not m.name.startswith("_")})


def describe_experiments() -> dict[str, str]:
    """Name → first line of the module docstring, read from the source without importing it."""
    import ast

    out: dict[str, str] = {}
    for m in pkgutil.iter_modules(list(sys.modules[_PACKAGE].__path__)):
        if m.name.startswith("_"):
            continue
        path = Path(getattr(m.module_finder, "path", "")) / f"{m.name}.py"
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        except (OSError, SyntaxError, ValueError):
            doc = ""
        out[m.name.replace("_", "-")] = doc.strip().splitlines()[0] if doc.strip() else ""
    return dict(sorted(out.items()))


def get_experiment(name: str) -> ModuleType:
    """Import the experiment module ``name`` and check it defines ``Config``, ``QUICK`` and ``run``.

    Raises:
        ValueError: ``name`` is not a registered experiment.
        TypeError: the module lacks ``Config`` (a dataclass), ``QUICK`` or ``run``.
    """
    known = list_experiments()
    if not isinstance(name, str) or name.replace("_", "-") not in known:
        raise ValueError(f"name: unknown experiment {name!r}; known: {', '.join(known) or '(none)'}")
    module = importlib.import_module(f"{_PACKAGE}.{name.replace('-', '_')}")
    cfg = getattr(module, "Config", None)
    if not isinstance(cfg, type) or not dataclasses.is_dataclass(cfg):
        raise TypeError(f"experiment {name!r} must define a dataclass Config")
    if not isinstance(getattr(module, "QUICK", None), cfg):
        raise TypeError(f"experiment {name!r} must define QUICK, a Config instance")
    if not callable(getattr(module, "run", None)):
        raise TypeError(f"experiment {name!r} must define run(config, out_dir)")
    return module


def resolve_config(
    name: str, config: Any = None, *, quick: bool = False, overrides: Mapping[str, Any] | None = None
) -> Any:
    """The experiment's ``Config``: ``config`` (an instance or a dict of fields), else ``QUICK``/defaults.

    Args:
        name: the experiment.
        config: a ``Config`` instance, a dict of its fields (unknown keys are errors), or None.
        quick: start from ``QUICK`` instead of ``Config()`` when ``config`` is None or a dict.
        overrides: dotted field → value (strings are parsed for the field's type).

    Raises:
        contrastlab.train.ConfigError: unknown or ill-typed fields, named.
    """
    from contrastlab.config import apply_overrides, from_dict, to_dict

    module = get_experiment(name)
    base = module.QUICK if quick else module.Config()
    if config is None:
        resolved = base
    elif isinstance(config, module.Config):
        resolved = config
    elif isinstance(config, Mapping):
        resolved = from_dict(module.Config, {**to_dict(base), **config})
    else:
        raise TypeError(f"config must be a {name} Config, a dict or None, got {type(config).__name__}")
    return apply_overrides(resolved, overrides) if overrides else resolved


def validate_results(results: Any, out_dir: Path, name: str = "experiment") -> dict[str, Any]:
    """Check a ``run`` return value against the results contract and return it.

    Raises:
        TypeError: a part has the wrong type (the message names it).
        ValueError: a table row has the wrong length or a figure file is missing.
    """
    if not isinstance(results, dict):
        raise TypeError(f"{name}.run must return a dict, got {type(results).__name__}")
    summary = results.get("summary", "")
    if not isinstance(summary, str):
        raise TypeError(f"{name} results['summary'] must be a str, got {type(summary).__name__}")
    metrics = results.get("metrics", {})
    if not isinstance(metrics, dict):
        raise TypeError(f"{name} results['metrics'] must be a dict, got {type(metrics).__name__}")
    for k, v in metrics.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            if not hasattr(v, "item"):
                raise TypeError(f"{name} results['metrics'][{k!r}] must be a number, got {type(v).__name__}")
    for i, table in enumerate(results.get("tables", [])):
        if not isinstance(table, dict) or not {"title", "columns", "rows"} <= table.keys():
            raise TypeError(f"{name} results['tables'][{i}] must be a dict with title, columns, rows")
        for j, row in enumerate(table["rows"]):
            if len(row) != len(table["columns"]):
                raise ValueError(
                    f"{name} results['tables'][{i}] ({table['title']!r}) row {j} has {len(row)} cells "
                    f"for {len(table['columns'])} columns"
                )
    for i, fig in enumerate(results.get("figures", [])):
        if not isinstance(fig, dict) or "file" not in fig:
            raise TypeError(f"{name} results['figures'][{i}] must be a dict with 'file' and 'caption'")
        if not (out_dir / fig["file"]).is_file():
            raise ValueError(f"{name} results['figures'][{i}]: {out_dir / fig['file']} does not exist")
    return results


def run_experiment(
    name: str,
    config: Any = None,
    out_dir: str | Path | None = None,
    *,
    quick: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the experiment ``name`` and write ``config.json`` and ``results.json`` into ``out_dir``.

    Args:
        name: a name from :func:`list_experiments` (``"k-gap"``).
        config: a ``Config`` instance, a dict of its fields, or None (``Config()``, or ``QUICK``).
        out_dir: where results and figures go (default :func:`default_out_dir`).
        quick: use the experiment's ``QUICK`` setting as the base config.
        overrides: dotted field → value, applied last.

    Returns:
        The results dict as written: the experiment's ``summary``, ``metrics``, ``tables``,
        ``figures`` plus ``name``, ``config``, ``version``, ``runtime_s``, ``timestamp``, ``host``
        and ``out_dir``.

    Raises:
        ValueError: unknown experiment; contrastlab.train.ConfigError: bad config fields.
    """
    import contrastlab
    from contrastlab.config import to_dict
    from contrastlab.io import write_json_atomic

    module = get_experiment(name)
    cfg = resolve_config(name, config, quick=quick, overrides=overrides)
    out = Path(out_dir) if out_dir is not None else default_out_dir(name)
    out.mkdir(parents=True, exist_ok=True)
    cfg_dict = to_dict(cfg)
    from contrastlab.distributed import rank

    is_main = rank() == 0  # under torchrun, rank 0 alone writes files
    if is_main:
        write_json_atomic(out / "config.json", {"name": name, "quick": quick, "config": cfg_dict})
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    results = validate_results(module.run(cfg, out), out, name)
    runtime = time.perf_counter() - t0
    full = {
        "name": name,
        "summary": results.get("summary", ""),
        "metrics": results.get("metrics", {}),
        "tables": results.get("tables", []),
        "figures": results.get("figures", []),
        **{k: v for k, v in results.items() if k not in ("summary", "metrics", "tables", "figures")},
        "config": cfg_dict,
        "quick": quick,
        "version": contrastlab.__version__,
        "runtime_s": runtime,
        "timestamp": started.isoformat(timespec="seconds"),
        "host": host_info(),
        "argv": list(sys.argv),
    }
    if is_main:
        write_json_atomic(out / "results.json", full)
    full["out_dir"] = str(out)
    return full
