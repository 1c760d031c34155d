"""The one place that starts or connects to Ray: the engine switch and a Ray session with network hygiene.

Everything that grows with the corpus runs on an :class:`Engine`: ``local`` (one process, the default) or
``ray``. With ``ray`` and no address, :func:`ray_session` starts an embedded Ray on this machine and shuts it
down afterwards; with an address (``HOST:PORT`` of a running cluster's GCS, as ``ray start --head`` prints
it) it connects to that cluster and disconnects afterwards.

Hygiene of the embedded Ray (and of any Ray connected through a loopback address):

- every process advertises, listens and connects on 127.0.0.1 (the node IP is set explicitly, and
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray resolve "this node" to the loopback address instead of
  the machine's external one, which it otherwise substitutes even for a ``127.0.0.1:PORT`` address);
- usage reporting is off (``RAY_USAGE_STATS_ENABLED=0``, set before Ray is imported) and there is no
  dashboard;
- token authentication is on, with a fresh random token in a file inside the session's temp dir
  (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``), not in ``~/.ray``;
- Ray's temp dir (sessions, sockets, logs, the token, the ``ray_current_cluster`` file via ``RAY_TMPDIR``) is
  a fresh folder inside the caller's folder, or, when that path is too long for a unix socket (107 bytes on Linux,
  and Ray appends about 66 characters of session and socket names), a fresh ``/tmp/contrastlab-ray-*``
  folder; the embedded Ray is shut down and the folder removed on exit (a folder inside the caller's
  folder is kept after an exception, for Ray's logs).

Ray is imported lazily: contrastlab imports and runs without it, and ``--engine ray`` without it installed
is one error that names the extra to install.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "ENGINES",
    "RAY_EXTRA",
    "Engine",
    "EngineError",
    "add_engine_arguments",
    "check_engine",
    "import_ray",
    "parse_address",
    "ray_environment",
    "ray_session",
    "ray_temp_dir",
    "remove_stale_temp_dirs",
]

ENGINES = ("local", "ray")
"""Engine names: ``local`` runs in this process, ``ray`` on a Ray cluster (embedded or at ``--address``)."""

RAY_EXTRA = "pip install 'contrastlab[ray]'"
"""How to install Ray Data and Ray Train at the pinned version."""

LOOPBACK = "127.0.0.1"
"""The node address of every Ray process contrastlab starts."""

_MAX_TEMP_DIR_CHARS = 40
"""Longest Ray temp dir: Linux unix socket paths hold 107 bytes, and Ray appends ``/session_<date>_<time>_
<microseconds>_<pid>`` (about 42 characters) and ``/sockets/plasma_store.<n>`` (about 24)."""

_CONNECT_TIMEOUT_S = 5.0  # the TCP probe of --address before Ray is asked to connect (Ray retries for a minute)


class EngineError(ValueError):
    """An unusable engine choice: an unknown name, Ray not installed, an address that does not answer.

    The message starts with the argument it is about (``engine`` or ``--address``).
    """


@dataclass(frozen=True)
class Engine:
    """Where corpus-scale work runs.

    Attributes:
        name: ``"local"`` (one process, the default) or ``"ray"``.
        address: ``HOST:PORT`` of a running Ray cluster (its GCS); ``None`` starts an embedded Ray on this
            machine. Only with ``name="ray"``.
    """

    name: str = "local"
    address: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise EngineError(f"engine: unknown engine {self.name!r}; known: {', '.join(ENGINES)}")
        if self.address is not None:
            if self.name != "ray":
                raise EngineError(f"--address {self.address}: an address needs --engine ray")
            parse_address(self.address)

    @property
    def is_ray(self) -> bool:
        """Whether work runs on Ray."""
        return self.name == "ray"


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--engine local|ray`` and ``--address HOST:PORT`` to a command's parser.

    Build the :class:`Engine` from the parsed values with ``Engine(args.engine, args.address)``.
    """
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help=f"local: one process (default); ray: Ray, embedded on this machine or at --address (needs {RAY_EXTRA})",
    )
    parser.add_argument(
        "--address", default=None, metavar="HOST:PORT", help="a running Ray cluster to use with --engine ray"
    )


def parse_address(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:6379``).

    Raises:
        EngineError: not ``HOST:PORT`` with a port in 1..65535; the message names ``--address``.
    """
    host, sep, port_text = address.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or "://" in address or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise EngineError(f"--address {address!r}: expected HOST:PORT of a running Ray cluster, e.g. 10.0.0.5:6379")
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def import_ray(*, loopback: bool = True) -> ModuleType:
    """Import Ray with usage reporting off (and, with ``loopback``, this node resolved to 127.0.0.1).

    The environment is read when Ray is first imported in this process; a later call cannot change it.

    Raises:
        EngineError: Ray is not installed (the message says to install ``contrastlab[ray]``).
    """
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if loopback:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise EngineError(f"engine: --engine ray needs Ray Data and Ray Train: {RAY_EXTRA}") from None
    return ray


@contextlib.contextmanager
def ray_temp_dir(parent: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh folder for Ray's temp files: inside ``parent`` if its path is short enough, else under /tmp.

    The folder is removed on exit, except one inside ``parent`` after an exception (it holds Ray's logs).
    """
    base = Path(parent).resolve()
    base.mkdir(parents=True, exist_ok=True)
    inside = len(str(base / "ray-12345678")) <= _MAX_TEMP_DIR_CHARS
    path = Path(tempfile.mkdtemp(prefix="ray-" if inside else "contrastlab-ray-", dir=base if inside else "/tmp"))
    failed = False
    try:
        yield path
    except BaseException:
        failed = True
        raise
    finally:
        if not (failed and inside):
            shutil.rmtree(path, ignore_errors=True)


def remove_stale_temp_dirs(parent: str | os.PathLike[str]) -> list[Path]:
    """Remove the Ray temp folders an earlier session left inside ``parent``; returns those removed.

    A session killed before its exit (SIGKILL, a lost machine) leaves its :func:`ray_temp_dir` folder
    behind, and one that ended in an exception keeps it for Ray's logs. Such a folder is recognised by its
    name (``ray-`` and 8 characters of :func:`tempfile.mkdtemp`) and by what a session writes first (the
    ``auth_token`` of :func:`ray_environment`, or Ray's ``session_*`` folders); nothing else is touched.
    Call it only where no session can be running: for a folder that one writer owns at a time (an
    embedding store), before that writer starts one.
    """
    base = Path(parent)
    removed = []
    for path in sorted(base.glob("ray-????????")) if base.is_dir() else []:
        if path.is_dir() and not path.is_symlink():
            if (path / "auth_token").is_file() or any(path.glob("session_*")):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def ray_environment(temp_dir: Path) -> Iterator[None]:
    """Point the Ray processes this process starts at ``temp_dir``: temp files and a fresh auth token there.

    Sets ``RAY_TMPDIR`` (which also marks every process started meanwhile, as they inherit it),
    ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH`` (a new random token in ``temp_dir/auth_token``, mode
    0600) for the duration of the block, and restores the previous values afterwards.
    """
    token = temp_dir / "auth_token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        with _environ(RAY_TMPDIR=str(temp_dir), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token)):
            _reload_auth_settings()
            yield
    finally:
        _reload_auth_settings()


def _reload_auth_settings() -> None:
    """Make this process's Ray read the authentication mode and token from the environment again.

    Ray reads ``RAY_AUTH_MODE`` into its configuration and caches the first token it loads; Ray's own
    ``ray.init`` reloads both the same way when it turns token authentication on.
    """
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _probe(address: str) -> None:
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise EngineError(
            f"--address {address}: no Ray cluster answers there ({e.strerror or type(e).__name__}); start one "
            "with `ray start --head` or drop --address to run an embedded Ray"
        ) from None


def check_engine(engine: Engine) -> None:
    """Fail now, before any slow work, if ``engine`` cannot run: Ray missing, or an address that does not answer.

    A local engine always passes. For ``ray``, Ray is imported (as :func:`ray_session` imports it) and an
    ``address`` is probed with one TCP connection; whether it is a Ray cluster shows only when
    :func:`ray_session` connects.

    Raises:
        EngineError: Ray is not installed (naming the extra), or nothing answers at ``address`` (naming
            ``--address``).
    """
    if not engine.is_ray:
        return
    host = parse_address(engine.address)[0] if engine.address is not None else LOOPBACK
    import_ray(loopback=_is_loopback(host))
    if engine.address is not None:
        _probe(engine.address)


def _current_gcs_address(ray: Any) -> str | None:
    with contextlib.suppress(Exception):
        return str(ray.get_runtime_context().gcs_address)
    return None


@contextlib.contextmanager
def ray_session(
    address: str | None,
    *,
    temp_dir: str | os.PathLike[str],
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
) -> Iterator[ModuleType]:
    """Connect this process to Ray for the duration of the ``with`` block; yields the ``ray`` module.

    Without ``address``: an embedded Ray on this machine (node IP 127.0.0.1, no dashboard, usage reporting
    off, temp dir from :func:`ray_temp_dir` under ``temp_dir``), shut down on exit; one that fails to start
    leaves no temp folder behind (one that fails later keeps it for Ray's logs). With ``address``: a
    connection to that cluster, closed on exit. If this process is already connected to Ray (a test
    fixture, a notebook) and ``address`` is ``None`` or that cluster's address, the connection is used as
    it is and left open.

    Args:
        address: ``HOST:PORT`` of a running cluster, or ``None`` for an embedded one.
        temp_dir: the run's folder; Ray's temp files go to a fresh folder inside it (see :func:`ray_temp_dir`).
        num_cpus: CPUs of the embedded Ray (default: all of this machine's). Ignored with ``address``.
        object_store_memory: bytes of the embedded Ray's object store (default: Ray's, 30% of memory).

    Raises:
        EngineError: Ray is not installed; ``address`` is malformed, does not answer, or is not a Ray
            cluster; this process is connected to another cluster.
    """
    host = parse_address(address)[0] if address is not None else LOOPBACK
    ray = import_ray(loopback=_is_loopback(host))
    if address is not None:
        _probe(address)
    if ray.is_initialized():
        current = _current_gcs_address(ray)
        if address is not None and current is not None and current != address:
            raise EngineError(f"--address {address}: this process is already connected to the Ray cluster at {current}")
        yield ray
        return
    if address is not None:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise EngineError(f"--address {address}: cannot connect to a Ray cluster there ({first})") from None
        try:
            yield ray
        finally:
            ray.shutdown()
        return
    with ray_temp_dir(temp_dir) as tmp, ray_environment(tmp):
        try:
            ray.init(
                num_cpus=num_cpus,
                object_store_memory=object_store_memory,
                include_dashboard=False,
                _node_ip_address=LOOPBACK,
                _temp_dir=str(tmp),
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        except BaseException:  # a Ray that never started: stop what it began and leave no folder in temp_dir
            with contextlib.suppress(Exception):
                ray.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            yield ray
        finally:
            ray.shutdown()
