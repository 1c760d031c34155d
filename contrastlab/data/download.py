"""``contrastlab data get``: download a dataset, verify its published checksum, and install it atomically.

What a run does, for a :class:`~contrastlab.data.catalog.Download`:

1. If ``<root>/<target>`` holds a manifest (``.contrastlab-download.json``) that names the same checksums and
   every file it lists is there with its recorded size, nothing happens: the copy was verified before.
2. Each file streams into ``<root>/.downloads/<file>.part``. An interrupted transfer is resumed with an HTTP
   ``Range`` request on the next run (a server that answers with the whole file restarts it cleanly); a
   ``.part`` left by a download of another address or checksum is discarded.
3. The whole file's MD5/SHA-256 is checked against the published value *before* anything is unpacked; a
   mismatch deletes the ``.part`` and is one error naming the file and both checksums.
4. An archive is unpacked (members escaping the folder are refused, see :mod:`contrastlab.data.archives`)
   into a hidden folder beside the target, ``<root>/.<target>.partial-<random suffix>``; its layout is checked (a task
   must hold ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/``; an image dataset the files its loader reads);
   the manifest is written last, and the folder is renamed to ``<root>/<target>`` in one step. A killed run
   leaves only hidden ``.partial`` folders (removed by the next run) and a resumable ``.part``: never a folder
   that looks complete.

Files that are not archives (SVHN's ``.mat``) are renamed into ``<root>`` once verified, and their manifest is
``<root>/.contrastlab-download-<name>.json``.

Nothing is downloaded unless :func:`fetch` is called (the command ``contrastlab data get``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, TextIO

from contrastlab.data.archives import ArchiveError, unpack_archive
from contrastlab.data.catalog import DOWNLOADS, Download, RemoteFile

__all__ = [
    "DownloadError",
    "Installed",
    "MANIFEST",
    "fetch",
    "url_download",
    "with_mirror",
    "verified_copy",
    "ByteBar",
    "lookup",
]

MANIFEST = ".contrastlab-download.json"
"""The manifest written into an unpacked folder: what was downloaded, its checksums, every file's size."""

_CHUNK = 1 << 20
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
Progress = Callable[[str, int, "int | None"], None]
"""``on_progress(file name, bytes so far, total bytes or None)``."""


class DownloadError(ValueError):
    """A download that cannot complete; the message is one line naming the file or argument.

    Bad input, an unreachable address, a checksum mismatch, a bad archive, a full disk or a folder that cannot
    be written.
    """


@dataclass(frozen=True)
class Installed:
    """The outcome of :func:`fetch`.

    Attributes:
        name: the dataset.
        path: the installed folder (or the data root, for files saved as they are).
        skipped: ``True`` when a verified copy was already there and nothing was downloaded.
        bytes: bytes transferred by this run.
    """

    name: str
    path: Path
    skipped: bool
    bytes: int


def lookup(name: str) -> Download:
    """The catalogue entry ``name``.

    Raises:
        DownloadError: an unknown name; the message lists the known ones.
    """
    if name not in DOWNLOADS:
        tasks = [n for n, d in DOWNLOADS.items() if d.kind == "task"]
        images = [n for n, d in DOWNLOADS.items() if d.kind == "images"]
        raise DownloadError(
            f"name: unknown dataset {name!r}; known tasks: {', '.join(tasks)}; known image datasets: "
            f"{', '.join(images)} (or a URL with --sha256 and --name)"
        )
    return DOWNLOADS[name]


def with_mirror(spec: Download, mirror: str) -> Download:
    """``spec`` with its files fetched from ``mirror``: the same file names, the published checksums.

    Raises:
        DownloadError: ``mirror`` is not an http(s) or file address.
    """
    parsed = urllib.parse.urlparse(mirror)
    if parsed.scheme not in ("http", "https", "file") or (parsed.scheme != "file" and not parsed.netloc):
        raise DownloadError(f"--mirror: expected an http(s):// or file:// address, got {mirror!r}")
    return replace(spec, base_url=mirror if mirror.endswith("/") else mirror + "/")


def url_download(url: str, sha256: str | None, name: str | None) -> Download:
    """A task zip at any address, checked against the SHA-256 the user gives, installed as ``<root>/<name>``.

    Raises:
        DownloadError: naming ``--sha256`` (absent, or not 64 hex digits), ``--name`` (absent, or not a plain
            folder name) or the URL (not http(s)/file, or without a file name).
    """
    parsed = urllib.parse.urlparse(url)
    file_name = urllib.parse.unquote(parsed.path.rsplit("/", 1)[-1])
    if parsed.scheme not in ("http", "https", "file") or not file_name:
        raise DownloadError(f"name: {url!r} is neither a known dataset nor an http(s)/file address of a file")
    if not sha256:
        raise DownloadError("--sha256: a URL needs the SHA-256 of the file it names (--sha256 HEX)")
    if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise DownloadError(f"--sha256: expected 64 hexadecimal digits, got {sha256!r}")
    if not name:
        raise DownloadError("--name: a URL needs the folder name to install it as (--name NAME)")
    if not _SAFE_NAME.match(name):
        raise DownloadError(f"--name: expected a plain folder name (letters, digits, '.', '_', '-'), got {name!r}")
    return Download(
        name=name,
        kind="task",
        base_url="",
        files=(RemoteFile(file_name, sha256=sha256.lower(), url=url),),
        target=name,
        unpack=True,
        expected=(),
        homepage=url,
        licence="as its publisher states",
        checksum_source="the --sha256 given on the command line",
    )


# ---------------------------------------------------------------------------------------------- manifest


def _manifest_path(spec: Download, root: Path) -> Path:
    return root / spec.target / MANIFEST if spec.unpack else root / f".contrastlab-download-{spec.name}.json"


def _published(spec: Download) -> list[dict[str, str]]:
    return [{"name": f.name, "md5": f.md5, "sha256": f.sha256} for f in spec.files]


def verified_copy(spec: Download, root: str | Path) -> Path | None:
    """The installed copy of ``spec`` under ``root`` if it is verified, else ``None``.

    Verified: its manifest names the published checksums and every file it lists has its recorded size.
    """
    root = Path(root)
    path = _manifest_path(spec, root)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("published") != _published(spec):
        return None
    base = root / spec.target if spec.unpack else root
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return None
    for rel, size in files.items():
        p = base / rel
        try:
            if not p.is_file() or p.stat().st_size != size:
                return None
        except OSError:
            return None
    return base


def _write_manifest(spec: Download, path: Path, base: Path, archives: list[dict[str, Any]]) -> None:
    if spec.unpack:
        files = {
            p.relative_to(base).as_posix(): p.stat().st_size
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
    else:
        files = {f.name: (base / f.name).stat().st_size for f in spec.files}
    record = {
        "name": spec.name,
        "kind": spec.kind,
        "published": _published(spec),
        "checksum_source": spec.checksum_source,
        "downloaded": archives,
        "files": files,
    }
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- transfer


def _write_chunk(out: IO[bytes], chunk: bytes) -> None:
    """Write one chunk of a download (a seam a test can make fail as a full disk does)."""
    out.write(chunk)


def _checksums(path: Path) -> tuple[str, str]:
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            md5.update(chunk)
            sha.update(chunk)
    return md5.hexdigest(), sha.hexdigest()


def _open(url: str, start: int, timeout: float) -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": "contrastlab-data-get"})
    if start:
        request.add_header("Range", f"bytes={start}-")
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - the scheme is checked above


def _transfer(url: str, part: Path, on_progress: Progress | None, timeout: float) -> int:
    """Stream ``url`` into ``part``, resuming from its size; returns the bytes transferred by this call."""
    have = part.stat().st_size if part.exists() else 0
    name = part.name.removesuffix(".part")
    try:
        response = _open(url, have, timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the range starts at or past the end: what is there cannot be trusted
            part.unlink()
            return _transfer(url, part, on_progress, timeout)
        raise DownloadError(f"{name}: {url} answered HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DownloadError(f"{name}: cannot reach {url} ({reason})") from None
    moved = 0
    with response:
        status = getattr(response, "status", 200)
        start = 0
        if have and status == 206:
            match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
            start = int(match.group(1)) if match else -1
        if start != have:  # the server sent the whole file (or an unexpected range): start over
            start = 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else None
        done = start
        with part.open("ab" if start else "wb") as out:
            try:
                while chunk := response.read(_CHUNK):
                    _write_chunk(out, chunk)
                    done += len(chunk)
                    moved += len(chunk)
                    if on_progress is not None:
                        on_progress(name, done, total)
            except http.client.IncompleteRead as e:
                _write_chunk(out, e.partial)
                done += len(e.partial)
                moved += len(e.partial)
            except (ConnectionError, TimeoutError, http.client.HTTPException) as e:
                raise DownloadError(
                    f"{name}: the transfer broke after {done} bytes ({e}); run the same command to resume"
                ) from None
    if total is not None and done != total:
        raise DownloadError(
            f"{name}: the transfer ended after {done} of {total} bytes; run the same command again to resume"
        )
    return moved


def _fetch_file(
    spec: Download, f: RemoteFile, cache: Path, on_progress: Progress | None, timeout: float
) -> tuple[Path, dict[str, Any], int]:
    """Download and verify one file into ``cache``; returns its path, its record and the bytes moved."""
    url = f.url or spec.base_url + urllib.parse.quote(f.name)
    part = cache / f"{f.name}.part"
    meta = cache / f"{f.name}.part.json"
    want = {"url": url, "md5": f.md5, "sha256": f.sha256}
    try:
        if json.loads(meta.read_text(encoding="utf-8")) != want:
            part.unlink(missing_ok=True)
    except (OSError, ValueError):
        part.unlink(missing_ok=True)
    meta.write_text(json.dumps(want), encoding="utf-8")
    moved = _transfer(url, part, on_progress, timeout)
    md5, sha = _checksums(part)
    for algo, expected, got in (("md5", f.md5, md5), ("sha256", f.sha256, sha)):
        if expected and expected.lower() != got:
            part.unlink(missing_ok=True)
            meta.unlink(missing_ok=True)
            raise DownloadError(
                f"{f.name}: checksum mismatch: {algo} expected {expected.lower()}, got {got} "
                f"(from {url}; the download was deleted)"
            )
    return part, {"file": f.name, "url": url, "md5": md5, "sha256": sha, "bytes": part.stat().st_size}, moved


# ------------------------------------------------------------------------------------------------ layout


def _is_task_folder(p: Path) -> bool:
    has_corpus = (p / "corpus.jsonl").is_file() or (p / "corpus").is_dir()
    has_queries = (p / "queries.jsonl").is_file() or (p / "queries").is_dir()
    return has_corpus and has_queries and (p / "qrels").is_dir()


def _check_layout(spec: Download, content: Path, archive: str) -> None:
    if spec.kind == "task":
        if _is_task_folder(content):
            return
        subs = [p for p in sorted(content.iterdir()) if p.is_dir()]
        if subs and all(_is_task_folder(p) for p in subs):  # cqadupstack: one task per forum
            return
        raise DownloadError(
            f"{archive}: holds no corpus.jsonl, queries.jsonl and qrels/ (not a retrieval task in BEIR's layout)"
        )
    missing = [rel for rel in spec.expected if not (content / Path(rel).relative_to(spec.target)).is_file()]
    if missing:
        raise DownloadError(f"{archive}: unpacked without {', '.join(missing[:4])} (not the {spec.name} archive)")


def _content_of(folder: Path) -> Path:
    """The unpacked data: the archive's single top folder when it has one, else the folder itself."""
    entries = list(folder.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder


# -------------------------------------------------------------------------------------------------- fetch


def _writable_root(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise DownloadError(f"--root: {root} is a file, not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".contrastlab-probe-", delete=True)
        probe.close()
    except OSError as e:
        raise DownloadError(f"--root: {root} is not a writable folder ({e.strerror or e})") from None


def _os_error(e: OSError, where: Path) -> DownloadError:
    if e.errno == errno.ENOSPC:
        return DownloadError(f"{where}: no space left on the device; nothing was installed (free space and rerun)")
    return DownloadError(f"{where}: {e.strerror or e}")


def fetch(
    spec: Download,
    root: str | Path,
    *,
    on_progress: Progress | None = None,
    timeout: float = 60.0,
) -> Installed:
    """Download, verify and install ``spec`` under ``root`` (see the module docstring).

    Args:
        spec: what to fetch (:func:`lookup`, :func:`with_mirror`, :func:`url_download`).
        root: the data root; created if absent.
        on_progress: called as bytes arrive, ``(file name, bytes so far, total or None)``.
        timeout: seconds a connection may stay silent.

    Returns:
        Where it was installed, and whether a verified copy made the download unnecessary.

    Raises:
        DownloadError: one line naming the file or argument: an unwritable root, an unreachable address, a
            truncated transfer (rerun to resume), a checksum mismatch, an archive that is not one or escapes its
            folder, a layout that is not the dataset's, a full disk, or a target that exists unverified.
    """
    root = Path(root).expanduser()
    _writable_root(root)
    found = verified_copy(spec, root)
    if found is not None:
        return Installed(spec.name, found, True, 0)
    if spec.unpack and os.path.lexists(root / spec.target):
        raise DownloadError(
            f"{spec.name}: {root / spec.target} exists but holds no verified download ({MANIFEST} missing or not "
            "matching); move it away to download again"
        )
    cache = root / ".downloads"
    moved = 0
    try:
        cache.mkdir(exist_ok=True)
        if spec.unpack:
            for stale in root.glob(f".{spec.target}.partial-*"):  # a killed run's leftovers
                shutil.rmtree(stale, ignore_errors=True)
        fetched = []
        for f in spec.files:
            if not spec.unpack and (root / f.name).is_file():
                md5, sha = _checksums(root / f.name)
                if (not f.md5 or f.md5 == md5) and (not f.sha256 or f.sha256 == sha):
                    fetched.append((root / f.name, {"file": f.name, "md5": md5, "sha256": sha}, True))
                    continue
                raise DownloadError(
                    f"{f.name}: {root / f.name} exists and does not match the published checksum; move it away"
                )
            part, record, n = _fetch_file(spec, f, cache, on_progress, timeout)
            moved += n
            fetched.append((part, record, False))
        if spec.unpack:
            ((part, record, _),) = fetched
            try:
                _install_archive(spec, root, part, record)
            except DownloadError:  # verified, yet not the archive expected: a rerun must fetch it again
                part.unlink(missing_ok=True)
                raise
            finally:
                (cache / f"{part.name}.json").unlink(missing_ok=True)
            part.unlink(missing_ok=True)
        else:
            for part, record, present in fetched:
                if not present:
                    os.replace(part, root / record["file"])
                    (cache / f"{part.name}.json").unlink(missing_ok=True)
            _write_manifest(spec, _manifest_path(spec, root), root, [r for _, r, _ in fetched])
    except OSError as e:
        raise _os_error(e, Path(e.filename) if e.filename else root) from None
    finally:
        with contextlib.suppress(OSError):
            cache.rmdir()  # only when empty: a resumable .part stays
    return Installed(spec.name, root / spec.target if spec.unpack else root, False, moved)


def _install_archive(spec: Download, root: Path, archive: Path, record: dict[str, Any]) -> None:
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{spec.target}.partial-"))
    try:
        try:
            unpack_archive(archive, staging)
        except ArchiveError as e:
            raise DownloadError(f"{spec.files[0].name}: {e}") from None
        content = _content_of(staging)
        _check_layout(spec, content, spec.files[0].name)
        _write_manifest(spec, content / MANIFEST, content, [record])
        try:
            os.rename(content, root / spec.target)
        except OSError:
            if os.path.lexists(root / spec.target):
                raise DownloadError(
                    f"{spec.name}: {root / spec.target} appeared while unpacking; not replaced"
                ) from None
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ display


class ByteBar:
    """Bytes received per file, drawn as a rich bar on a terminal, a line per tenth in logs, or nothing.

    Args:
        mode: ``auto``, ``live``, ``plain`` or ``off`` (see :func:`contrastlab.progress.resolve_mode`).
        stream: where it is drawn (default ``sys.stderr``).
    """

    def __init__(self, mode: str = "auto", stream: TextIO | None = None) -> None:
        from contrastlab.progress import resolve_mode

        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.mode = resolve_mode(mode, self.stream)
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}
        self._shown: dict[str, int] = {}
        self._t0 = time.monotonic()

    def __call__(self, name: str, done: int, total: int | None) -> None:
        """Show that ``done`` of ``total`` bytes (None: unknown) of ``name`` have arrived."""
        if self.mode == "live":
            if self._progress is None:
                from rich.console import Console
                from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

                self._progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    console=Console(file=self.stream, force_terminal=True),
                    transient=True,
                )
                self._progress.start()
            if name not in self._tasks:
                self._tasks[name] = self._progress.add_task(name, total=total)
            self._progress.update(self._tasks[name], completed=done, total=total)
        elif self.mode == "plain":
            step = 10 * done // total if total else done // (100 * _CHUNK)
            if self._shown.get(name, -1) < step:
                self._shown[name] = step
                size = f" of {total / 1e6:.1f} MB" if total else ""
                print(f"{name}: {done / 1e6:.1f} MB{size}", file=self.stream, flush=True)

    def close(self) -> None:
        """Stop drawing."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
