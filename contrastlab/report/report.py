"""Reports from run folders: ``report.md`` and a self-contained ``report.html``.

A run folder holds ``results.json`` (``summary``, ``metrics``, ``tables``, ``figures``, ``config``…,
the layout of ``docs/contracts.md``) and/or ``metrics.jsonl`` files written by
:func:`contrastlab.train.fit` (in the folder or one level below, e.g. ``RUN/train/metrics.jsonl``).
Every run gets its summary, metric and result tables, its own figures and training-curve figures
drawn from ``metrics.jsonl``. With several runs a comparison table of their shared metrics and an
overlay of their training losses follow. The HTML embeds every PNG as base64, so it is one file.

The report opens on a table of contents, and on what a reader most likely came for: a run that audited
a real model (:func:`audits_a_real_model`: ``contrastlab audit`` of a text model or embeddings, or an
experiment such as ``text-finetune`` that ran such audits) comes first, before the overview and the
other runs.

A run whose ``results.json`` has a ``layout`` (an audit's: ``lede``, ``headline``, ``grid``, ``sections``) is
shown in that order: a sentence on what was measured, the headline table, the grid, then each section as its
one-sentence verdict over its table and figure side by side; its ``metrics`` stay in ``results.json``, and its
tables no section shows are folded away at the end. A table cell may be an interval,
``{"mean": m, "low": l, "high": h}``, printed ``m [l, h]``; a table may carry a ``note``, printed under it.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrastlab import figures
from contrastlab.io import CorruptFileError, loads_json_verified, read_json_verified, write_text_atomic

__all__ = ["write_report", "load_run", "RunData", "audits_a_real_model"]


@dataclass
class RunData:
    """One run folder as the report sees it."""

    path: Path
    name: str
    results: dict[str, Any] = field(default_factory=dict)
    curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> metrics.jsonl rows
    folder: Path | None = None  # the folder the report names, when it is not ``path`` (a run still being staged)

    @property
    def shown(self) -> Path:
        """The folder the report names: :attr:`folder`, else :attr:`path`."""
        return self.folder if self.folder is not None else self.path


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, each verified against its own checksum.

    A last line without its newline (cut by a crash while training) is skipped.

    Raises:
        contrastlab.io.CorruptFileError: any other row fails its checksum (file and line named).
    """
    rows = []
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            row = loads_json_verified(line, f"{path} line {i}")
        except CorruptFileError:
            if i == len(lines):  # no newline after it: cut by a crash mid-write
                continue
            raise
        if isinstance(row.get("step"), (int, float)):
            rows.append(row)
    return rows


def load_run(path: str | Path) -> RunData:
    """Read ``results.json`` and every ``metrics.jsonl`` (depth ≤ 2) of a run folder.

    ``results.json`` is verified against the checksum it was written with
    (:func:`contrastlab.io.read_json_verified`) before it is parsed.

    Raises:
        FileNotFoundError: the folder has neither file.
        contrastlab.io.CorruptFileError: ``results.json`` fails its checksum or is not a JSON object
            (the message names the file).
    """
    p = Path(path)
    results: dict[str, Any] = {}
    rfile = p / "results.json"
    if rfile.is_file():
        results = read_json_verified(rfile)
    curves: dict[str, list[dict[str, Any]]] = {}
    candidates = sorted([p / "metrics.jsonl", *p.glob("*/metrics.jsonl"), *p.glob("*/*/metrics.jsonl")])
    for m in candidates:
        if m.is_file():
            rows = _read_jsonl(m)
            if rows:
                curves[str(m.parent.relative_to(p)) if m.parent != p else "train"] = rows
    if not results and not curves:
        raise FileNotFoundError(f"run_dirs: {p} holds neither results.json nor metrics.jsonl")
    name = str(results.get("name") or p.name)
    return RunData(path=p, name=name, results=results, curves=curves)


# ------------------------------------------------------------------------------------------ figures


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def _curve_keys(rows: list[dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k != "step" and k not in keys and isinstance(v, (int, float)) and not isinstance(v, bool):
                keys.append(k)
    return keys


def _plot_curves(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """One panel per logged quantity (loss, lr, eval/…) against the step."""
    keys = _curve_keys(rows)
    ncols = min(3, max(1, len(keys)))
    nrows = max(1, math.ceil(len(keys) / ncols))
    fig, axes = figures.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.9 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker="." if len(pts) < 30 else None)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        if key.endswith("loss") and all(v > 0 for _, v in pts) and len(pts) > 1:
            values = [v for _, v in pts]
            if max(values) / max(min(values), 1e-300) > 20:
                ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)


#: Above this many training curves in one run, they are drawn as one overlay of the losses.
MAX_CURVE_FIGURES = 3
#: Above this many loss curves over all runs, the comparison's overlay is left out (it would be unreadable).
MAX_OVERLAY_SERIES = 12


def _plot_overlay(runs: list[RunData], path: Path, *, title: str = "") -> bool:
    """Training loss of every run (and sub-run) on one axis.

    Returns False, drawing nothing, with fewer than two loss curves or more than
    :data:`MAX_OVERLAY_SERIES` of them.
    """
    series = []
    for run in runs:
        for label, rows in run.curves.items():
            pts = [(r["step"], r["loss"]) for r in rows if isinstance(r.get("loss"), (int, float))]
            if pts:
                name = label if len(runs) == 1 else (run.name if label == "train" else f"{run.name}/{label}")
                series.append((name, pts))
    if len(series) < 2 or len(series) > MAX_OVERLAY_SERIES * (4 if len(runs) == 1 else 1):
        return False

    fig, ax = figures.subplots(figsize=(6.5, 3.8))
    for label, pts in series:
        ax.plot([s for s, _ in pts], [v for _, v in pts], label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7 if len(series) > 8 else 8, ncol=2 if len(series) > 8 else 1)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    figures.save_png(fig, path, dpi=100)
    return True


# ---------------------------------------------------------------------------------------- rendering


def _is_interval(v: Any) -> bool:
    """Whether a table cell is an interval ``{"mean", "low", "high"}``."""
    return isinstance(v, dict) and {"mean", "low", "high"} <= v.keys()


def _interval_parts(v: dict[str, Any]) -> tuple[str, str]:
    """An interval cell's mean and ``[low, high]``, the three with one number of decimals (4 significant digits)."""
    values = [v["mean"], v["low"], v["high"]]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in values):
        return _fmt(v["mean"]), f"[{_fmt(v['low'])}, {_fmt(v['high'])}]"
    largest = max(abs(float(x)) for x in values)
    decimals = min(8, max(0, 3 - math.floor(math.log10(largest)))) if largest > 0 else 0
    mean, low, high = (f"{float(x):.{decimals}f}" for x in values)
    return mean, f"[{low}, {high}]"


def _fmt(v: Any) -> str:
    if _is_interval(v):
        return " ".join(_interval_parts(v))
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}" if v != 0 else "0"
    return str(v)


def _md_cell(v: Any) -> str:
    return _fmt(v).replace("|", "\\|").replace("\n", " ")


def _md_table(columns: list[str], rows: list[list[Any]]) -> str:
    head = "| " + " | ".join(_md_cell(c) for c in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join([head, sep, *body])


def _html_cell(v: Any) -> str:
    """A table cell: numbers right-aligned as they are, text with its inline markdown rendered (as report.md shows it)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f'<td class="num">{html.escape(_fmt(v))}</td>'
    if _is_interval(v):
        mean, interval = _interval_parts(v)
        return f'<td class="num">{html.escape(mean)} <span class="ci">{html.escape(interval)}</span></td>'
    return f"<td>{_inline_md(_fmt(v))}</td>"


def _html_table(columns: list[str], rows: list[list[Any]], css: str = "") -> str:
    """A table in a box of the page's width that scrolls sideways itself when the table is wider.

    In a table of more than three columns, an interval cell's ``[low, high]`` goes under its mean.
    """
    head = "".join(f"<th>{_inline_md(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in rows)
    if len(columns) > 3 and any(_is_interval(c) for row in rows for c in row):
        css = f"{css} stacked".strip()
    tbody = f'<tbody class="{css}">' if css else "<tbody>"
    return f'<div class="table"><table><thead><tr>{head}</tr></thead>{tbody}{body}</tbody></table></div>'


def _inline_md(text: str) -> str:
    """Escape ``text`` and render the inline markdown summaries use: `code`, **bold**, *italic*."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    out = re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?!\*)", r"<em>\1</em>", out)
    return out


def _md_to_html(text: str) -> str:
    """Paragraphs and ``-`` bullet lists of a markdown summary as HTML."""
    blocks = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith(("- ", "* ")) for line in lines):
            items = "".join(f"<li>{_inline_md(line.lstrip()[2:])}</li>" for line in lines)
            blocks.append(f"<ul>{items}</ul>")
        elif block.strip():
            blocks.append(f"<p>{_inline_md(' '.join(lines))}</p>")
    return "\n".join(blocks)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1180px;margin:1.2em auto;padding:0 1em;
color:#222;line-height:1.45;overflow-wrap:break-word}
div.table{max-width:100%;overflow-x:auto}
h1{border-bottom:2px solid #444;margin:0.2em 0;font-size:1.7em}h2{border-bottom:1px solid #ccc;margin:1.1em 0 0.4em}
table{border-collapse:collapse;margin:0.5em 0;font-size:0.92em}
th,td{border:1px solid #ccc;padding:0.2em 0.6em}th{background:#f2f2f2}td.num{text-align:right;
font-variant-numeric:tabular-nums}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:0.9em;color:#555}
code{background:#f4f4f4;padding:0 0.2em}.meta{color:#666;font-size:0.88em}pre{background:#f7f7f7;padding:0.6em;
overflow-x:auto;font-size:0.85em}
span.ci{color:#666;font-size:0.88em;white-space:nowrap}p.lede{font-size:1.05em;margin:0.5em 0}
p.verdict{margin:0.3em 0}h3{margin:1em 0 0.2em;font-size:1.05em}
div.diagnostic{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start}
div.diagnostic>div.table{flex:0 1 auto}div.diagnostic>figure{flex:1 1 560px;margin:0.8em 0;min-width:0}
div.diagnostic>figure.wide{flex-basis:100%}tbody.stacked span.ci{display:block}tbody.headline{font-size:1.08em}
p.note{color:#555;font-size:0.88em;margin:0 0 0.5em}div.diagnostic>div.aside{flex:1 1 320px}
nav#contents{font-size:0.9em;color:#555}nav#contents h2{font-size:1em;border:0;margin:0;display:inline}
nav#contents ol{margin:0.2em 0}
"""


#: A figure wider than this many times its height (several panels in a row) takes a row of its own beside a table.
WIDE_FIGURE = 2.2


def _png_aspect(png: bytes) -> float:
    """Width over height of a PNG, from its header (0 for bytes that are not a PNG)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 24:
        return 0.0
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return width / height if height else 0.0


@dataclass
class _Figure:
    path: Path
    caption: str


@dataclass
class _Section:
    title: str
    md: list[str] = field(default_factory=list)
    html: list[str] = field(default_factory=list)

    def table(self, title: str | None, columns: list[str], rows: list[list[Any]], css: str = "") -> None:
        if title:
            self.md.append(f"**{title}**\n")
            self.html.append(f"<h3>{html.escape(title)}</h3>")
        self.md.append(_md_table(columns, rows) + "\n")
        self.html.append(_html_table(columns, rows, css))

    def paragraph(self, text: str, css: str = "") -> None:
        self.md.append(text.strip() + "\n")
        self.html.append(f'<p class="{css}">{_inline_md(text)}</p>' if css else _md_to_html(text))

    def figure(self, fig: _Figure, out_dir: Path, number: int) -> None:
        rel = os.path.relpath(fig.path, out_dir)
        self.md.append(f"![{fig.caption}]({rel})\n\n*Figure {number}: {fig.caption}*\n")
        png = fig.path.read_bytes()
        data = base64.b64encode(png).decode("ascii")
        wide = ' class="wide"' if _png_aspect(png) > WIDE_FIGURE else ""
        self.html.append(
            f'<figure{wide}><img alt="{html.escape(fig.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>Figure {number}: {_inline_md(fig.caption)}</figcaption></figure>"
        )

    def side_by_side(self, build: Any) -> None:
        """What ``build()`` adds to the page, in one row that wraps on a narrow screen (report.md: one after the other)."""
        start = len(self.html)
        build()
        self.html[start:] = ['<div class="diagnostic">' + "".join(self.html[start:]) + "</div>"]


def _run_figures(run: RunData, sec: _Section, out_dir: Path, tag: str) -> list[_Figure]:
    """The run's own figures (a missing one is noted in ``sec``), then its training curves."""
    found: list[_Figure] = []
    for f in run.results.get("figures") or []:
        path = run.path / str(f.get("file", ""))
        if path.is_file():
            found.append(_Figure(path, str(f.get("caption", f.get("file")))))
        else:
            sec.md.append(f"*(figure {f.get('file')} is missing from {run.shown})*\n")
            sec.html.append(f"<p><em>figure {html.escape(str(f.get('file')))} is missing</em></p>")
    if len(run.curves) > MAX_CURVE_FIGURES:
        # many sub-runs (seeds, cells of a table): one overlay of their losses, not one figure each
        png = out_dir / f"curves_{tag}_overlay.png"
        if _plot_overlay([run], png, title=f"{run.name}: training loss of {len(run.curves)} sub-runs"):
            found.append(_Figure(png, f"Training loss of each of the {len(run.curves)} trainings of {run.name}."))
    else:
        for label, rows in run.curves.items():
            png = out_dir / f"curves_{tag}_{_slug(label)}.png"
            _plot_curves(rows, f"{run.name}: {label} ({len(rows)} logged steps)", png)
            found.append(_Figure(png, f"Training curves of {run.name} ({label}/metrics.jsonl) against the step."))
    return found


def _add_table(sec: _Section, table: dict[str, Any], *, title: bool = True, css: str = "") -> None:
    """A ``results.json`` table, with its title as a heading and its ``note`` (if any) in small print under it."""
    columns = [str(c) for c in table.get("columns", [])]
    sec.table(str(table.get("title", "")) if title else None, columns, list(table.get("rows", [])), css)
    if table.get("note"):
        sec.paragraph(str(table["note"]), "note")


def _laid_out(
    run: RunData, sec: _Section, figs: list[_Figure], out_dir: Path, figure_no: list[int], layout: dict[str, Any]
) -> None:
    """A run with a ``layout``: the headline beside the lede, the grid, then each section's verdict.

    Each section shows its table's title in small print, then its table and figure side by side.
    """
    tables = list(run.results.get("tables") or [])
    head = layout.get("headline") or {}
    if head.get("title"):
        sec.md.append(f"### {head['title']}\n")
        sec.html.append(f"<h3>{html.escape(str(head['title']))}</h3>")

    def opening() -> None:
        if head:
            _add_table(sec, {**head, "note": None}, title=False, css="headline")
        start = len(sec.html)
        if layout.get("lede"):
            sec.paragraph(str(layout["lede"]), "lede")
        if head.get("note"):
            sec.paragraph(str(head["note"]), "note")
        sec.html[start:] = ['<div class="aside">' + "".join(sec.html[start:]) + "</div>"]

    sec.side_by_side(opening)
    if layout.get("grid"):
        _add_table(sec, layout["grid"], css="grid")
    by_file = {f.path.name: f for f in figs}
    shown_tables: set[int] = set()
    for part in layout.get("sections") or []:
        sec.md.append(f"### {part.get('title', '')}\n")
        sec.html.append(f"<h3>{html.escape(str(part.get('title', '')))}</h3>")
        if part.get("verdict"):
            sec.paragraph(str(part["verdict"]), "verdict")
        index = part.get("table")
        fig = by_file.pop(str(part.get("figure")), None)
        if isinstance(index, int) and 0 <= index < len(tables) and tables[index].get("title"):
            title = str(tables[index]["title"])  # the table's own title, in small print: what its rows hold
            sec.md.append(f"**{title}**\n")
            sec.html.append(f'<p class="note">{_inline_md(title)}</p>')

        def build(index: Any = index, fig: _Figure | None = fig) -> None:
            if isinstance(index, int) and 0 <= index < len(tables):
                shown_tables.add(index)
                _add_table(sec, tables[index], title=False)
            if fig is not None:
                figure_no[0] += 1
                sec.figure(fig, out_dir, figure_no[0])

        sec.side_by_side(build)
    for fig in by_file.values():  # figures no section shows
        figure_no[0] += 1
        sec.figure(fig, out_dir, figure_no[0])
    rest = [t for i, t in enumerate(tables) if i not in shown_tables]
    if rest:
        sec.md.append(f"<details><summary>{len(rest)} more tables</summary>\n")
        sec.html.append(f"<details><summary>{len(rest)} more tables</summary>")
        for t in rest:
            _add_table(sec, t)
        sec.md.append("</details>\n")
        sec.html.append("</details>")
    if run.results.get("summary"):
        sec.md.append(f"<details><summary>the run in one paragraph</summary>\n\n{run.results['summary']}\n</details>\n")
        sec.html.append(
            f"<details><summary>the run in one paragraph</summary>{_md_to_html(str(run.results['summary']))}</details>"
        )


def _run_section(run: RunData, out_dir: Path, figure_no: list[int], tag: str) -> _Section:
    r = run.results
    sec = _Section(title=f"{run.name}")
    meta = [f"folder `{run.shown}`"]
    if "runtime_s" in r:
        meta.append(f"runtime {float(r['runtime_s']):.1f} s")
    if "timestamp" in r:
        meta.append(str(r["timestamp"]))
    if "version" in r:
        meta.append(f"contrastlab {r['version']}")
    host = r.get("host") or {}
    if isinstance(host, dict) and host:
        meta.append(f"{host.get('hostname', '?')} (torch {host.get('torch', '?')}, {host.get('cpu_count', '?')} CPUs)")
    sec.md.append(" · ".join(meta) + "\n")
    sec.html.append(f'<p class="meta">{_inline_md(" · ".join(meta))}</p>')
    figs = _run_figures(run, sec, out_dir, tag)
    layout = r.get("layout")
    if isinstance(layout, dict) and layout:
        _laid_out(run, sec, figs, out_dir, figure_no, layout)
    else:
        if r.get("summary"):
            sec.md.append(str(r["summary"]).strip() + "\n")
            sec.html.append(_md_to_html(str(r["summary"])))
        metrics = r.get("metrics") or {}
        if metrics:
            sec.table("Metrics", ["metric", "value"], [[k, v] for k, v in metrics.items()])
        for t in r.get("tables") or []:
            _add_table(sec, t)
        for fig in figs:
            figure_no[0] += 1
            sec.figure(fig, out_dir, figure_no[0])
    if r.get("config"):
        cfg = json.dumps(r["config"], indent=2)
        sec.md.append(f"<details><summary>config</summary>\n\n```json\n{cfg}\n```\n</details>\n")
        sec.html.append(f"<details><summary>config</summary><pre>{html.escape(cfg)}</pre></details>")
    return sec


def _comparison(runs: list[RunData]) -> tuple[list[str], list[list[Any]]]:
    """Metrics that at least two runs report, one column per run that has any of them."""
    per_run = [r.results.get("metrics") or {} for r in runs]
    keys = list(dict.fromkeys(k for m in per_run for k in m))
    shared = [k for k in keys if sum(k in m for m in per_run) >= 2]
    cols = [i for i, m in enumerate(per_run) if any(k in m for k in shared)]
    columns = ["metric", *[runs[i].name for i in cols]]
    return columns, [[k, *[per_run[i].get(k) for i in cols]] for k in shared]


def _first_sentence(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    # a sentence ends at ". " before a capital letter, but not after "et al." or "e.g."/"i.e."
    m = re.search(r"(?<!et al\.)(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s(?=[A-Z(])", text)
    head = text[: m.start()] if m else text
    if len(head) <= limit:
        return head
    head = head[: limit - 1].rstrip() + "…"
    for mark in ("**", "`"):  # a cut inside **bold** or `code` closes it, so the markup still renders
        if head.count(mark) % 2:
            head += mark
    return head


def _overview(runs: list[RunData]) -> tuple[list[str], list[list[Any]]]:
    """One row per run: its name, runtime and the first sentence of its summary."""
    rows = []
    for r in runs:
        rt = r.results.get("runtime_s")
        rows.append(
            [
                r.name,
                f"{float(rt):.1f} s" if isinstance(rt, (int, float)) else "—",
                _first_sentence(r.results.get("summary", "")),
            ]
        )
    return ["run", "runtime", "summary"], rows


def audits_a_real_model(results: dict[str, Any]) -> bool:
    """Whether a run's ``results.json`` is an audit of a real model, shown first in a report.

    True for a ``contrastlab audit`` run (``name`` ``audit``) of a text model or an embeddings file — not of a
    contrastlab run's synthetic held-out pairs (``pairs.kind`` ``contrastlab run``) — and for a run that lists
    audits it ran (a non-empty ``audits`` mapping, as ``text-finetune`` writes).
    """
    if results.get("name") == "audit":
        pairs = results.get("pairs")
        return not (isinstance(pairs, dict) and pairs.get("kind") == "contrastlab run")
    audits = results.get("audits")
    return isinstance(audits, dict) and bool(audits)


def _anchor(title: str, taken: set[str]) -> str:
    """A heading's anchor as GitHub renders markdown headings (lower case, punctuation dropped, spaces → -)."""
    base = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") or "section"
    anchor, n = base, 1
    while anchor in taken:
        anchor, n = f"{base}-{n}", n + 1
    taken.add(anchor)
    return anchor


def write_report(
    run_dirs: list[str | Path] | str | Path, out_dir: str | Path, *, shown_as: list[str | Path] | None = None
) -> tuple[Path, Path]:
    """Write ``report.md`` and the self-contained ``report.html`` for one or more run folders.

    Args:
        run_dirs: run folders (each with ``results.json`` and/or ``metrics.jsonl``).
        out_dir: where the report and its curve PNGs go (created).
        shown_as: the folder the report names for each run, one per run folder (default: the run folders
            themselves): a run written into a staging folder and moved in afterwards is named by its final folder.

    Returns:
        ``(report.md path, report.html path)``.

    Raises:
        ValueError: ``run_dirs`` is empty, ``shown_as`` does not match it, or a ``results.json`` fails its
            checksum (CorruptFileError).
        FileNotFoundError: a folder has neither file.

    Examples:
        >>> write_report(["runs/k-gap-20260101-120000"], "runs/k-gap-20260101-120000")  # doctest: +SKIP
    """
    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    if not dirs:
        raise ValueError("run_dirs must name at least one run folder")
    if shown_as is not None and len(shown_as) != len(dirs):
        raise ValueError(f"shown_as must name one folder per run folder ({len(dirs)}), got {len(shown_as)}")
    runs = [load_run(d) for d in dirs]
    if shown_as is not None:
        for r, shown in zip(runs, shown_as, strict=True):
            r.folder = Path(shown)
    names = [r.name for r in runs]
    for r in runs:  # two runs of one experiment: tell them apart by folder
        if names.count(r.name) > 1:
            r.name = f"{r.name} ({r.shown.name})"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = "contrastlab report: " + (runs[0].name if len(runs) == 1 else f"{len(runs)} runs")
    real = [r for r in runs if audits_a_real_model(r.results)]
    others = [r for r in runs if not audits_a_real_model(r.results)]
    sections: list[_Section] = []
    notes: list[str] = []  # one per section, shown in the table of contents
    figure_no = [0]
    seen: dict[str, int] = {}

    def add_run(run: RunData, note: str) -> None:
        tag = _slug(run.name)
        seen[tag] = seen.get(tag, 0) + 1
        sections.append(_run_section(run, out, figure_no, tag if seen[tag] == 1 else f"{tag}{seen[tag]}"))
        notes.append(note)

    for run in real:  # what a reader most likely came for
        add_run(run, "audit of a real model")
    if len(runs) > 1:
        cmp = _Section(title="Overview")
        cmp.table(None, *_overview(runs))
        columns, rows = _comparison(runs)
        if rows:
            cmp.table("Metrics reported by more than one run", columns, rows)
        overlay = out / "curves_overlay.png"
        if _plot_overlay(runs, overlay):
            figure_no[0] += 1
            cmp.figure(_Figure(overlay, "Training loss of every run against the step."), out, figure_no[0])
        sections.append(cmp)
        notes.append("every run in one table")
    for run in others:
        add_run(run, "")

    taken: set[str] = set()
    anchors = [_anchor(sec.title, taken) for sec in sections]
    md = [f"# {title}\n"]
    if len(runs) > 1:
        md.append("Runs: " + ", ".join(f"`{r.name}` ({r.shown})" for r in runs) + "\n")
    md.append("## Contents\n")
    md.extend(
        f"{i}. [{sec.title}](#{a})" + (f" — {note}" if note else "")
        for i, (sec, a, note) in enumerate(zip(sections, anchors, notes, strict=True), 1)
    )
    md.append("")
    toc = "".join(
        f'<li><a href="#{a}">{html.escape(sec.title)}</a>' + (f" — {html.escape(note)}" if note else "") + "</li>"
        for sec, a, note in zip(sections, anchors, notes, strict=True)
    )
    body = [f'<nav id="contents"><h2>Contents</h2><ol>{toc}</ol></nav>']
    for s, a in zip(sections, anchors, strict=True):
        md.append(f"## {s.title}\n")
        md.extend(s.md)
        body.append(f'<h2 id="{a}">{html.escape(s.title)}</h2>\n' + "\n".join(s.html))
    md_path, html_path = out / "report.md", out / "report.html"
    write_text_atomic(md_path, "\n".join(md))
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n<h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    write_text_atomic(html_path, page)
    return md_path, html_path
