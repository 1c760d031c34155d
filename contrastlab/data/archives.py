r"""Unpacking a downloaded archive (zip, tar, gzip-compressed tar) into a folder, refusing members that escape it.

A member is refused, before anything is written, when its name is absolute (``/etc/x``, ``C:\\x``), climbs out
with ``..``, or (tar) is a link, a device or a FIFO: an archive can only create plain files and folders inside
the target. The archive's kind is read from its first bytes, not its name, so a file that is not an archive is
one clear error.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

__all__ = ["ArchiveError", "archive_kind", "unpack_archive", "member_path"]


class ArchiveError(ValueError):
    """An archive that cannot be unpacked safely: not an archive, corrupt, or with a member escaping the target.

    The message does not name the archive; the caller puts its name in front.
    """


def archive_kind(path: str | Path) -> str:
    """``"zip"``, ``"tar"`` (plain or gzip-compressed) from the file's first bytes.

    Raises:
        ArchiveError: the file is neither.
    """
    p = Path(path)
    with p.open("rb") as f:
        head = f.read(262)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar":
        return "tar"
    raise ArchiveError(f"not a zip or tar archive (its first bytes are {head[:8]!r})")


def member_path(name: str, target: Path) -> Path:
    """Where member ``name`` lands under ``target``.

    Raises:
        ArchiveError: ``name`` is absolute, has a drive, is empty, or climbs out of ``target`` with ``..``.
    """
    cleaned = name.replace("\\", "/")
    parts = PurePosixPath(cleaned).parts
    if not parts or cleaned.startswith("/") or (len(parts[0]) >= 2 and parts[0][1] == ":") or ".." in parts:
        raise ArchiveError(f"member {name!r} would be written outside the target folder; refusing the archive")
    dest = target.joinpath(*[p for p in parts if p not in ("", ".")])
    if dest != target and target not in dest.parents:
        raise ArchiveError(f"member {name!r} would be written outside the target folder; refusing the archive")
    return dest


def _unzip(path: Path, target: Path) -> None:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise ArchiveError(f"not a readable zip archive ({e})") from None
    with zf:
        infos = zf.infolist()
        plan = [(info, member_path(info.filename, target)) for info in infos]  # every name checked first
        for info, dest in plan:
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                with zf.open(info) as src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            except (zipfile.BadZipFile, EOFError) as e:  # a CRC mismatch, a truncated member
                raise ArchiveError(f"member {info.filename!r} is corrupt ({e})") from None


def _untar(path: Path, target: Path) -> None:
    try:
        tf = tarfile.open(path, "r:*")
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ArchiveError(f"not a readable tar archive ({e})") from None
    with tf:
        try:
            members = tf.getmembers()
        except (tarfile.TarError, EOFError) as e:
            raise ArchiveError(f"a truncated or corrupt tar archive ({e})") from None
        plan = []
        for m in members:
            dest = member_path(m.name, target)
            if not (m.isfile() or m.isdir()):
                raise ArchiveError(
                    f"member {m.name!r} is a link or special file; refusing the archive (only files and folders)"
                )
            plan.append((m, dest))
        for m, dest in plan:
            if m.isdir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(m)
            if src is None:  # pragma: no cover - a regular member always has a file object
                raise ArchiveError(f"member {m.name!r} has no data")
            try:
                with src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            except (tarfile.TarError, EOFError) as e:
                raise ArchiveError(f"member {m.name!r} is truncated or corrupt ({e})") from None


def unpack_archive(path: str | Path, target: str | Path) -> None:
    """Unpack the zip or tar archive ``path`` into the folder ``target`` (created if absent).

    Every member's name is checked before the first byte is written; only plain files and folders are made.

    Raises:
        ArchiveError: not an archive, a corrupt archive, or a member that would land outside ``target``.
        OSError: the disk is full or ``target`` is not writable.
    """
    p, t = Path(path), Path(target).resolve()
    t.mkdir(parents=True, exist_ok=True)
    if archive_kind(p) == "zip":
        _unzip(p, t)
    else:
        _untar(p, t)
