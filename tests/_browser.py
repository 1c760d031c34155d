"""Headless Chromium for the report tests: a page opened offline, read back after a script of its own has run.

Chromium (Debian's ``chromium`` package) opens the page with the network cut off (every host name resolves to
nothing and the proxy is a closed port), so nothing but inline data and files beside the page can load. The
script given runs after the page's ``load`` event with ``b`` bound to ``<body>``; what it writes into ``data-*``
attributes of ``<body>`` comes back from ``--dump-dom``. A test that needs the browser skips without it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9"]


def browser() -> str:
    """The Chromium binary; the calling test skips when there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    return found


def probe(page: Path, script: str, *, width: int = 1280, height: int = 900, budget_ms: int = 5000) -> dict[str, str]:
    """The ``data-*`` attributes of ``<body>`` (without the prefix) once ``script`` has run after ``page`` loaded.

    The script is added to a copy of the page in the same folder (relative paths resolve as in the original),
    which is removed afterwards. The window is ``width`` × ``height`` pixels.
    """
    probed = page.with_name(f"probed-{page.name}")
    listener = f"<script>window.addEventListener('load', () => {{ const b = document.body; {script} }});</script>"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", listener + "</body>", 1), encoding="utf-8")
    argv = [browser(), "--headless", "--no-sandbox", "--disable-gpu", *OFFLINE, f"--window-size={width},{height}"]
    try:
        dom = subprocess.run(
            [*argv, f"--virtual-time-budget={budget_ms}", "--dump-dom", probed.as_uri()],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout
    finally:
        probed.unlink()
    body = dom.split("<body", 1)[1].split(">", 1)[0] if "<body" in dom else ""
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body))
