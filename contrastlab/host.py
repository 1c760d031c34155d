"""Where a result was produced: the host record every ``results.json`` carries."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

__all__ = ["host_info"]


def host_info() -> dict[str, Any]:
    """Where a result was produced: host, platform, python, torch, CPU count, GPU name if any."""
    import torch

    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    return info
