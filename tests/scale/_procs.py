"""The processes a Ray session started, found by the temp dir it put in their environment, and their sockets.

Every Ray process inherits ``RAY_TMPDIR`` from the process that started Ray (the cluster fixture and
``ray_session`` set it to the session's own temp dir), so ``/proc/PID/environ`` tells which processes a
session started without trusting process names.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def session_processes(temp_dir: str | os.PathLike[str]) -> list[int]:
    """Pids (other than this one) whose environment holds ``RAY_TMPDIR=<temp_dir>``."""
    marker = f"RAY_TMPDIR={temp_dir}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if marker in env.split(b"\0"):
            found.append(int(proc.name))
    return sorted(found)


def wait_gone(temp_dir: str | os.PathLike[str], timeout: float = 20.0) -> list[int]:
    """Wait until no process of the session is left; return those still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := session_processes(temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _hex_ip(text: str) -> str:
    """The address of a /proc/net/tcp{,6} row (little-endian 32-bit words) as text."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    if words[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4-mapped IPv6 address
        return ".".join(str(b) for b in words[12:])
    return ":".join(words[i : i + 2].hex() for i in range(0, 16, 2))


def listening_addresses(pids: list[int]) -> list[tuple[str, int, int]]:
    """``(address, port, pid)`` of every TCP socket in LISTEN state that one of ``pids`` holds."""
    inode_pid: dict[str, int] = {}
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inode_pid[target[8:-1]] = pid
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inode_pid:  # 0A: TCP_LISTEN
                ip, port = fields[1].split(":")
                out.append((_hex_ip(ip), int(port, 16), inode_pid[fields[9]]))
    return out
