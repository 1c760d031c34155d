"""report.html at a laptop's width in headless Chromium: the page itself never scrolls sideways.

Chromium (Debian's ``chromium`` package) opens the page at 1280 × 900 CSS pixels with the network cut off. A
script run after the page's ``load`` event writes the document's scroll width and the viewport's width into
attributes of ``<body>``, which ``--dump-dom`` prints. The page is made as wide as reports get: a table of
many long columns, a run folder with a long path, a summary with an unbroken identifier. A control page
without the report's table box overflows, so the probe can fail.
"""

from __future__ import annotations

from pathlib import Path

from contrastlab.io import write_json_atomic
from contrastlab.report import write_report
from tests._browser import probe

PROBE = (
    "b.setAttribute('data-scroll', document.documentElement.scrollWidth);"
    " b.setAttribute('data-view', document.documentElement.clientWidth);"
)


def scroll_and_view_width(page: Path, width: int = 1280) -> tuple[int, int]:
    """(the document's scroll width, the viewport's width) of ``page`` in headless Chromium ``width`` px wide."""
    found = probe(page, PROBE, width=width, height=900)
    assert "scroll" in found and "view" in found, "the load event did not run"
    return int(found["scroll"]), int(found["view"])


def test_a_report_of_wide_tables_and_long_names_does_not_scroll_sideways_at_1280_px(tmp_path: Path) -> None:
    run = tmp_path / ("a-run-folder-with-a-long-name-" * 6) / "identifiability-table-20261206-031500"
    columns = ["generator", *(f"violated + corrected loss, setting {i}" for i in range(12))]
    rows = [
        [f"gen{r}", *(f"**0.62{i} ± 0.003** [0.61, 0.63] (n=3) \\| 0.63 ± 0.00" for i in range(12))] for r in range(3)
    ]
    write_json_atomic(
        run / "results.json",
        {
            "name": "identifiability-table",
            "summary": "Every cell ran `contrastlab.experiments.identifiability_table.run_one_cell_of_the_table_with_all_settings`.",
            "metrics": {"a_very_long_metric_name_" * 5: 1.0},
            "tables": [{"title": "Table 1", "columns": columns, "rows": rows}],
        },
    )
    _, page = write_report([run], tmp_path / "report")
    scroll, view = scroll_and_view_width(page)
    assert 1200 <= view <= 1280 and scroll <= view

    control = page.with_name("control.html")  # the same page with the table box's CSS taken out
    control.write_text(page.read_text(encoding="utf-8").replace("div.table{max-width:100%;overflow-x:auto}", ""))
    scroll, view = scroll_and_view_width(control)
    assert scroll > view
