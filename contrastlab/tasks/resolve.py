"""A task by name: ``--task scifact`` (or a job's ``path: scifact``) finds the folder ``contrastlab data get`` made.

A value that exists as a path is that path. Otherwise it is looked up under the data root
(``$CONTRASTLAB_DATA``, else ``./data``; a training job's ``data.root`` has already been put in front of a
relative path). A value naming one of the tasks ``data get`` fetches (``scifact``, ``cqadupstack/android``)
that is not on disk is an error saying which command fetches it.
"""

from __future__ import annotations

from pathlib import Path

from contrastlab.data.catalog import task_names
from contrastlab.data.registry import default_data_root

__all__ = ["resolve_task_path"]


def resolve_task_path(value: str | Path, root: str | Path | None = None) -> Path:
    """The folder a ``--task`` value names.

    Args:
        value: a path, or a task name such as ``scifact`` (``cqadupstack/<forum>`` for one forum).
        root: the data root names are looked up under (default ``$CONTRASTLAB_DATA`` or ``./data``).

    Returns:
        ``value`` when it exists; else ``root/value`` when that exists; else ``value`` unchanged (the reader
        then says it is not a folder).

    Raises:
        ValueError: ``value`` names a task ``contrastlab data get`` fetches and it is not on disk; the message
            gives the command.
    """
    path = Path(value).expanduser()
    if path.exists():
        return path
    base = default_data_root() if root is None else Path(root).expanduser()
    if not path.is_absolute() and (base / path).exists():
        return base / path
    parts = path.parts
    known = set(task_names())
    for i, part in enumerate(parts):
        if part in known:
            # a relative bare name is looked for under the data root; a longer path under its own parent
            parent = Path(*parts[:i]) if i else base
            where = parent / part
            raise ValueError(
                f"task: {str(value)!r} is not downloaded ({where} does not exist); fetch it with "
                f"`contrastlab data get {part} --root {parent}` (the data root: --root, $CONTRASTLAB_DATA or ./data)"
            )
    return path
