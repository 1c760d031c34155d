"""The audit's report.html as a person opens it: headless Chromium loads it and every figure decodes.

Chromium (Debian's ``chromium`` package) opens the page with the network cut off (every host name
resolves to nothing and the proxy is a closed port), so a figure that is not inline or in a file next
to the report cannot load. A script added after the page's ``load`` event counts the ``<img>`` elements
and those that decoded (``complete && naturalWidth > 0``) into attributes of ``<body>``, which
``--dump-dom`` prints. A control page with one broken image shows that the count can fail.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from contrastlab.audit import AuditConfig
from contrastlab.audit.run import audit
from tests._browser import probe

# After the page's load event, count the <img> elements and those that decoded (complete, naturalWidth > 0).
PROBE = (
    "const imgs = [...document.images];"
    " b.setAttribute('data-images', imgs.length);"
    " b.setAttribute('data-loaded', imgs.filter(i => i.complete && i.naturalWidth > 0).length);"
)


class _Sources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v is not None]


def images_loaded(page: Path) -> tuple[int, int]:
    """(number of <img>, number decoded) after ``page`` loads in offline headless Chromium."""
    found = probe(page, PROBE, budget_ms=10000)
    assert "images" in found and "loaded" in found, "the load event did not run"
    return int(found["images"]), int(found["loaded"])


def _check_report(out: Path, figures: list[dict[str, str]]) -> None:
    page = out / "report.html"
    parser = _Sources()
    parser.feed(page.read_text(encoding="utf-8"))
    for url in parser.urls:  # inline, or a file next to the report: never the network
        assert url.startswith(("data:", "#")) or (out / url).is_file(), url
    assert all((out / f["file"]).is_file() for f in figures)  # report.md's figures, next to it
    images, loaded = images_loaded(page)
    assert images == len(figures) and loaded == images


@pytest.mark.slow
def test_control_page_with_a_broken_image_is_caught(tmp_path: Path) -> None:
    png = tmp_path / "dot.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.imsave(png, np.zeros((4, 4, 3)))
    page = tmp_path / "page.html"
    page.write_text(
        '<html><body><img src="dot.png"><img src="missing.png"><img src="https://example.org/x.png"></body></html>'
    )
    assert images_loaded(page) == (3, 1)  # the local file decodes; the missing and the remote ones do not


@pytest.mark.slow
def test_audit_report_of_embeddings_renders_every_figure(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    q = rng.normal(size=(300, 16)).astype(np.float32)
    np.save(tmp_path / "emb.npy", np.concatenate([q, q + rng.normal(size=q.shape).astype(np.float32)]))
    lines = [f"find the {['cat', 'dog', 'file', 'sum'][i % 4]} number {i}\tdef f{i}()" for i in range(300)]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "audit"
    res = audit(AuditConfig(model=str(tmp_path / "emb.npy"), pairs=str(tmp_path / "pairs.tsv"), progress=False), out)
    assert len(res["figures"]) == 4  # temperature, risk, tails, norms
    _check_report(out, res["figures"])


@pytest.mark.slow
def test_audit_report_of_a_text_model_renders_every_figure(tmp_path: Path) -> None:
    # a text model adds the norm-against-word-frequency panel; a tiny random BERT keeps encoding cheap
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("wordfreq")
    from tests.models.text_models import write_tiny_bert

    model = write_tiny_bert(tmp_path / "bert", "st")
    words = ["cat", "dog", "file", "sum", "path", "list", "sort", "open"]
    lines = [f"find the {words[i % 8]} of {words[(i * 3) % 8]} number {i}\tdef f{i}()" for i in range(200)]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "audit"
    cfg = AuditConfig(model=str(model), pairs=str(tmp_path / "pairs.tsv"), progress=False, max_seq_length=16)
    res = audit(cfg, out)
    assert len(res["figures"]) == 5  # temperature, risk, tails, norms, norm claims
    _check_report(out, res["figures"])
