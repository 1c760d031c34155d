import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from contrastlab.audit import AuditConfig
from contrastlab.audit.run import audit

# After the page's load event, count the <img> elements and those that decoded (complete, naturalWidth > 0).
PROBE = (
    "<script>window.addEventListener('load', () => {"
    " const imgs = [...document.images];"
    " document.body.setAttribute('data-images', imgs.length);"
    " document.body.setAttribute('data-loaded', imgs.filter(i => i.complete && i.naturalWidth > 0).length);"
    "});</script></body>"
)


@pytest.mark.slow
def test_audit_report_renders_every_figure_in_headless_chromium(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    rng = np.random.default_rng(0)
    q = rng.normal(size=(300, 16)).astype(np.float32)
    np.save(tmp_path / "emb.npy", np.concatenate([q, q + rng.normal(size=q.shape).astype(np.float32)]))
    lines = [f"find the {['cat', 'dog', 'file', 'sum'][i % 4]} number {i}\tdef f{i}()" for i in range(300)]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "audit"
    res = audit(AuditConfig(model=str(tmp_path / "emb.npy"), pairs=str(tmp_path / "pairs.tsv"), progress=False), out)
    page = (out / "report.html").read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE, 1), encoding="utf-8")
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    images = re.search(r'data-images="(\d+)"', dom)
    loaded = re.search(r'data-loaded="(\d+)"', dom)
    assert images is not None and loaded is not None, "the load event did not run"
    assert int(images.group(1)) == len(res["figures"]) == 3
    assert int(loaded.group(1)) == int(images.group(1))
