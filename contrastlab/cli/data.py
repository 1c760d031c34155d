"""``contrastlab data [NAME]``: where each data set's files go and which are present; ``data get NAME`` fetches one."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from contrastlab.cli._options import EXIT_OK, UsageError, add_command, one_line

DATA_FILES: dict[str, dict[str, Any]] = {}
"""Extra datasets for ``contrastlab data``: name → ``{"files": [paths under root], "source": str}``.

Datasets registered in ``contrastlab.data.registry.DATASETS`` are listed as well.
"""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The options of ``contrastlab data`` and ``contrastlab data get``."""
    p = add_command(
        sub,
        "data",
        help="where dataset files go, which are present; `data get NAME` downloads one",
        description="List datasets and their files. `contrastlab data get NAME` downloads a BEIR task (scifact, "
        "nfcorpus, ...) or an image dataset (cifar10, cifar100, stl10, svhn) from its official address, checks the "
        "published checksum before unpacking, and installs it under the data root; rerunning finds the verified "
        "copy and does nothing, and an interrupted download resumes. `contrastlab data get URL --sha256 HEX --name "
        "NAME` fetches any task zip. Nothing is ever downloaded otherwise.",
    )
    p.add_argument("name", nargs="?", help="one dataset (all files listed), or `get`")
    p.add_argument("target", nargs="?", help="data get: the dataset name, or the URL of a task zip")
    p.add_argument("--root", help="data root (default $CONTRASTLAB_DATA or ./data)")
    p.add_argument("--mirror", metavar="URL", help="data get: the same files under another base address")
    p.add_argument("--sha256", metavar="HEX", help="data get URL: the SHA-256 the file must have")
    p.add_argument("--name", dest="as_name", metavar="NAME", help="data get URL: the folder to install it as")
    p.add_argument("--quiet", action="store_true", help="data get: no progress bar")
    return p


def _dataset_table(root: Path) -> list[tuple[str, str, list[str], bool]]:
    """Each dataset's name, source, files under ``root``, and whether they are all present."""
    from contrastlab.data.registry import DATASETS, dataset_available

    rows: list[tuple[str, str, list[str], bool]] = []
    for name, spec in DATASETS.items():
        files = sorted({f for fs in spec.files.values() for f in fs})
        present = all(dataset_available(name, root, s) for s in ("train", "test") if s in spec.splits)
        rows.append((name, spec.source, files, present))
    for name, info in DATA_FILES.items():
        files = list(info.get("files", []))
        rows.append((name, str(info.get("source", "")), files, all((root / f).exists() for f in files)))
    return rows


def _task_table(root: Path) -> list[tuple[Path, list[str]]]:
    """BEIR-layout tasks at ``root`` or one or two folders below it, with their qrels splits."""
    from contrastlab.tasks import beir_splits, tasks_under

    return [(p, beir_splits(p)) for p in tasks_under(root)]


def _get(args: argparse.Namespace, root: Path) -> int:
    """``data get NAME`` or ``data get URL --sha256 HEX --name NAME``: download, verify and install under ``root``."""
    from contrastlab.data.download import ByteBar, DownloadError, fetch, lookup, url_download, with_mirror

    if args.target is None:
        raise UsageError("data get: name: which dataset? (contrastlab data get NAME; contrastlab data lists them)")
    try:
        if "://" in args.target:
            if args.mirror:
                raise DownloadError("--mirror: applies to a named dataset, not to a URL")
            spec = url_download(args.target, args.sha256, args.as_name)
        else:
            for flag, value in (("--sha256", args.sha256), ("--name", args.as_name)):
                if value is not None:
                    raise DownloadError(f"{flag}: applies to a URL, not to the named dataset {args.target!r}")
            spec = lookup(args.target)
            spec = with_mirror(spec, args.mirror) if args.mirror else spec
        bar = ByteBar("off" if args.quiet else "auto")
        try:
            done = fetch(spec, root, on_progress=bar)
        finally:
            bar.close()
    except DownloadError as e:
        raise UsageError(f"data get: {one_line(e)}") from None
    if done.skipped:
        print(f"{spec.name}: a verified copy is already in {done.path}; nothing downloaded")
    else:
        print(f"{spec.name}: {done.bytes / 1e6:.1f} MB downloaded, checksum verified, installed in {done.path}")
    if spec.kind == "task":
        inner = next((p.name for p in sorted(done.path.iterdir()) if p.is_dir()), "")
        task = spec.name if (done.path / "qrels").is_dir() else f"{spec.name}/{inner}"
        print(f"use it: contrastlab audit MODEL --task {task}  (licence: {spec.licence})")
    return EXIT_OK


def run(args: argparse.Namespace, rest: list[str]) -> int:
    """List the data root's datasets and tasks (``args.name``: one dataset's files), or ``data get``."""
    root = Path(args.root) if args.root else Path(os.environ.get("CONTRASTLAB_DATA", "data"))
    if args.name == "get":
        return _get(args, root)
    if args.target is not None or any(v is not None for v in (args.mirror, args.sha256, args.as_name)):
        raise UsageError("data: NAME takes no further argument or --mirror/--sha256/--name (those are for data get)")
    rows = _dataset_table(root)
    print(f"data root: {root.resolve()}  (set with --root or $CONTRASTLAB_DATA; `contrastlab data get NAME` downloads)")
    tasks = _task_table(root)
    if tasks and args.name is None:
        print("\nretrieval tasks (BEIR layout; contrastlab audit MODEL --task DIR --split SPLIT):")
        for path, splits in tasks:
            print(f"    {path}   splits: {', '.join(splits)}")
    known = {r[0] for r in rows}
    if args.name is not None and args.name not in known:
        raise UsageError(f"data: unknown dataset {args.name!r}; known: {', '.join(sorted(known)) or '(none)'}")
    if not rows:
        print("no file-backed datasets are registered (the synthetic worlds need no files)")
        return EXIT_OK
    names = [args.name] if args.name else [r[0] for r in rows]
    for name, source, files, present in rows:
        if name not in names:
            continue
        print(f"\n{name}: {'present' if present else 'missing'}   (source: {source})")
        shown = files if args.name else files[:6]
        for f in shown:
            print(f"    {root / f}")
        if len(files) > len(shown):
            print(f"    ... {len(files) - len(shown)} more (contrastlab data {name})")
    return EXIT_OK
