"""The first screen of an audit's report.html, as headless Chromium lays it out at 1280 × 800: the headline scores.

Chromium (:mod:`tests._browser`; the test skips without it) opens the report of a small task audit (a tiny
random BERT on a synthetic BEIR task) with the network cut off. A script run after the page's ``load`` event
writes into attributes of ``<body>``: the viewport's height, the bottom edge
(page coordinates) of the table under the "Headline scores" heading and the top edge of the grid under "Every
retrieval score", the headline's rows, and whether the headline table is the page's first table. A control page — the same report with the old
order, a metrics dump of every number before the headline — shows that the probe can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contrastlab.audit import AuditConfig
from contrastlab.audit.run import audit
from tests._browser import browser, probe

PROBE = (
    "const under = text => {"
    " const h = [...document.querySelectorAll('h3')].find(h => h.textContent.startsWith(text));"
    " return h && h.nextElementSibling ? h.nextElementSibling.querySelector('table') : null; };"
    " const table = under('Headline scores'), grid = under('Every retrieval score');"
    " const edge = (t, side) => t ? Math.ceil(t.getBoundingClientRect()[side] + window.scrollY) : -1;"
    " b.setAttribute('data-view', window.innerHeight);"
    " b.setAttribute('data-headline-bottom', edge(table, 'bottom'));"
    " b.setAttribute('data-headline-rows', table ? table.tBodies[0].rows.length : 0);"
    " b.setAttribute('data-grid-top', edge(grid, 'top'));"
    " b.setAttribute('data-first-table', table !== null && document.querySelector('table') === table);"
)


def first_screen(page: Path) -> dict[str, str]:
    """The probe's attributes of ``page`` in headless Chromium, 1280 × 800 px."""
    found = probe(page, PROBE, width=1280, height=800)
    assert "view" in found, "the load event did not run"
    return found


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sentence_transformers")
    browser()
    from tests.audit.test_task_audit import write_task
    from tests.models.text_models import write_tiny_bert

    base = tmp_path_factory.mktemp("first-screen")
    model, task = write_tiny_bert(base / "model", "st"), write_task(base / "toy")
    cfg = AuditConfig(model=str(model), task=str(task), progress=False, n_boot=50, k_max=16, norm_words=40)
    audit(cfg, base / "audit")
    return base / "audit" / "report.html"


def test_the_first_screen_holds_the_headline_scores_and_the_grids_start(report: Path) -> None:
    screen = first_screen(report)
    view = int(screen["view"])
    assert 600 <= view <= 800  # the window less what headless Chromium keeps of its frame
    assert screen["first-table"] == "true"  # nothing tabulated before the headline
    assert screen["headline-rows"] == "5"  # nDCG@10, MAP@100, Recall@100, MRR@10, P@1
    assert 0 < int(screen["headline-bottom"]) <= view
    assert int(screen["headline-bottom"]) < int(screen["grid-top"]) < view  # the grid begins on it


def test_a_metrics_dump_before_the_headline_pushes_it_off_the_first_screen(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    rows = "".join(f"<tr><td>metric_{i}</td><td>0.5</td></tr>" for i in range(70))
    dump = f'<h3>Metrics</h3><div class="table"><table><tbody>{rows}</tbody></table></div>'
    control = report.with_name("control.html")
    heading = page.index("<h3>Headline scores")
    control.write_text(page[:heading] + dump + page[heading:], encoding="utf-8")
    screen = first_screen(control)
    assert screen["first-table"] == "false" and int(screen["headline-bottom"]) > int(screen["view"])
