"""The engine switch and Ray's network and process hygiene, on the session's two-node cluster and embedded."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contrastlab.scale.cluster import (
    Engine,
    EngineError,
    parse_address,
    ray_session,
    ray_temp_dir,
    remove_stale_temp_dirs,
)
from tests.scale._procs import listening_addresses, session_processes, wait_gone


def test_engine_names_and_addresses():
    assert Engine().name == "local" and not Engine().is_ray
    assert Engine("ray", "127.0.0.1:6379").is_ray
    with pytest.raises(EngineError, match="engine: unknown engine 'spark'"):
        Engine("spark")
    with pytest.raises(EngineError, match="--address .*needs --engine ray"):
        Engine("local", "127.0.0.1:6379")
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("[::1]:6379") == ("::1", 6379)
    for bad in ("10.0.0.5", "10.0.0.5:0", "10.0.0.5:70000", ":6379", "ray://10.0.0.5:10001", "host:port"):
        with pytest.raises(EngineError, match="^--address"):
            parse_address(bad)


def test_ray_missing_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(EngineError, match=r"contrastlab\[ray\]"), ray_session(None, temp_dir=tmp_path):
        pass


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_address_names_the_argument(tmp_path):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(EngineError, match=f"^--address {address}: no Ray cluster answers"):
        with ray_session(address, temp_dir=tmp_path):
            pass


def test_temp_dir_inside_a_short_folder_else_under_tmp(tmp_path):
    short = Path("/tmp") / "cl-t"
    with ray_temp_dir(short) as inside:
        assert inside.parent == short.resolve() and inside.is_dir()
    assert not inside.exists()
    deep = tmp_path / ("d" * 60)
    with ray_temp_dir(deep) as fallback:
        assert fallback.parent == Path("/tmp") and fallback.name.startswith("contrastlab-ray-")
    assert not fallback.exists()
    short.rmdir()


def test_cluster_nodes_are_on_loopback(ray_cluster):
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    print(f"cluster start-up: {ray_cluster.start_s:.1f} s")


def test_cluster_listens_on_loopback_only(ray_cluster):
    pids = session_processes(ray_cluster.temp_dir)
    assert len(pids) >= 2  # a GCS and two raylets at least
    sockets = listening_addresses([*pids, os.getpid()])
    assert sockets, "no listening socket found: the check would pass vacuously"
    assert {ip for ip, _, _ in sockets} == {"127.0.0.1"}, sockets


_EMBEDDED = textwrap.dedent(
    """
    import os, sys
    from contrastlab.scale.cluster import ray_session
    from tests.scale._procs import listening_addresses, session_processes

    with ray_session(None, temp_dir=sys.argv[1], num_cpus=1, object_store_memory=80 * 2**20) as ray:
        tmp = os.environ["RAY_TMPDIR"]
        assert os.environ["RAY_AUTH_TOKEN_PATH"] == tmp + "/auth_token"
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert ray.get(ray.remote(lambda: 7).remote()) == 7
        ips = {n["NodeManagerAddress"] for n in ray.nodes()}
        listen = {ip for ip, _, _ in listening_addresses([*session_processes(tmp), os.getpid()])}
        print(tmp, sorted(ips), sorted(listen), flush=True)
    """
)


def test_embedded_session_is_loopback_and_leaves_nothing(tmp_path):
    pytest.importorskip("ray")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", _EMBEDDED, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    tmp, ips, listen = run.stdout.strip().splitlines()[-1].split(" ", 2)
    assert ips == "['127.0.0.1']" and listen == "['127.0.0.1']", run.stdout
    assert not Path(tmp).exists()  # the session's temp dir is removed
    assert wait_gone(tmp) == []


def test_stale_temp_dirs_are_recognised_by_their_name_and_what_a_session_writes(tmp_path):
    token, session, plain, named = (tmp_path / n for n in ("ray-a1b2c3d4", "ray-x_y_z_12", "ray-notes_12", "rays"))
    token.mkdir()
    (token / "auth_token").write_text("0" * 64)
    (session / "session_2026-12-06_03-00-00_000000_1").mkdir(parents=True)
    plain.mkdir()  # a ray-XXXXXXXX folder of the user's: neither a token nor a session
    (plain / "notes.txt").write_text("mine")
    (named / "auth_token").parent.mkdir()
    (named / "auth_token").write_text("0")  # a session's content, not a session's name
    (tmp_path / "ray-12345678").write_text("a file, not a folder")
    assert remove_stale_temp_dirs(tmp_path) == [token, session]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ray-12345678", "ray-notes_12", "rays"]
    assert remove_stale_temp_dirs(tmp_path / "missing") == []


def test_a_session_temp_dir_is_what_remove_stale_temp_dirs_recognises(tmp_path):
    from contrastlab.scale.cluster import ray_environment

    short = Path("/tmp") / f"cl-s{os.getpid()}"
    try:
        with ray_temp_dir(short) as tmp, ray_environment(tmp):
            assert remove_stale_temp_dirs(short) == [tmp]  # as a session left it (never while one runs)
    finally:
        short.rmdir()


def test_an_embedded_ray_that_fails_to_start_leaves_no_temp_folder(monkeypatch):
    """ray.init fails after Ray wrote into its temp folder: the error propagates and the run's folder holds nothing."""
    from contrastlab.scale import cluster

    calls: list[str] = []

    class _RayThatFailsToStart:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs: object) -> None:
            (Path(str(kwargs["_temp_dir"])) / "session_2026-12-07_00-00-00_000000_1" / "logs").mkdir(parents=True)
            calls.append("init")
            raise RuntimeError("Failed to start the raylet")

        def shutdown(self) -> None:
            calls.append("shutdown")

    monkeypatch.setattr(cluster, "import_ray", lambda loopback=True: _RayThatFailsToStart())
    out = Path("/tmp") / f"cl-f{os.getpid()}"  # short: the temp folder goes inside (see ray_temp_dir)
    try:
        with pytest.raises(RuntimeError, match="Failed to start the raylet"), ray_session(None, temp_dir=out):
            pytest.fail("the session started")
        assert list(out.iterdir()) == []
        assert calls == ["init", "shutdown"]  # whatever Ray began is stopped
    finally:
        shutil.rmtree(out, ignore_errors=True)
