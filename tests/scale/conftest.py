"""One local Ray cluster of two nodes for the whole test session, and the rules for tests that use it.

``ray_cluster`` starts Ray's own ``ray.cluster_utils.Cluster`` once per session: a head and one worker
node, both on 127.0.0.1, 2 logical CPUs and a 100 MiB object store each, no dashboard, usage reporting off,
Ray's temp dir a fresh short folder (see ``contrastlab.scale.cluster.ray_temp_dir``); the driver (this
pytest process) is connected to it. Teardown shuts everything down and fails if any process the cluster
started is still running 20 s later (they are found by the temp dir in their environment).

Every test that requests ``ray_cluster`` is put in the xdist group ``"ray"`` here (the Makefile runs
pytest with ``--dist loadgroup``), so one pytest worker starts the cluster and runs all of them; a test
that needs Ray without the fixture writes ``pytestmark = pytest.mark.xdist_group("ray")``. Without Ray
installed these tests are skipped. Tests that only need the cluster live under ``tests/scale/``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrastlab.scale.cluster import EngineError, import_ray
from tests.scale._procs import wait_gone

# Ray reads these when it is first imported, whichever test imports it first (see contrastlab.scale.cluster)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

NODE_CPUS = 2
NODE_OBJECT_STORE = 100 * 1024 * 1024


@dataclass(frozen=True)
class RayCluster:
    """The session's cluster: its GCS address, Ray temp dir and start-up time."""

    address: str
    temp_dir: Path
    start_s: float


@pytest.hookimpl(tryfirst=True)  # before xdist's hook turns the xdist_group marks into scheduling groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    from contrastlab.scale.cluster import LOOPBACK, ray_environment, ray_temp_dir

    try:
        ray = import_ray(loopback=True)
    except EngineError:
        pytest.skip("Ray is not installed (pip install 'contrastlab[ray]')")
    from ray.cluster_utils import Cluster

    # Ray's address file and auth token go to the temp dir, whose path the processes inherit as their marker
    with ray_temp_dir(tmp_path_factory.getbasetemp()) as tmp, ray_environment(tmp):
        node = {"node_ip_address": LOOPBACK, "num_cpus": NODE_CPUS, "object_store_memory": NODE_OBJECT_STORE}
        t0 = time.perf_counter()
        cluster = Cluster(
            initialize_head=True, head_node_args={**node, "include_dashboard": False, "temp_dir": str(tmp / "ray")}
        )
        try:
            cluster.add_node(**node)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
            yield RayCluster(cluster.address, tmp, time.perf_counter() - t0)
        finally:
            ray.shutdown()
            cluster.shutdown()
            left = wait_gone(tmp)
            for pid in left:  # ours by the marker in their environment; ended so they outlive no test run
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            assert not left, f"Ray processes left running after the cluster's teardown: {left}"
