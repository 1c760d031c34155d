import json
import re
from pathlib import Path

import pytest
import torch

from contrastlab.io import write_json_atomic
from contrastlab.report import load_run, write_report
from contrastlab.train import TrainConfig, fit, step_generator


def _png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [1, 0])
    fig.savefig(path, dpi=40)
    plt.close(fig)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    a = tmp_path_factory.mktemp("run_a")
    model = torch.nn.Linear(3, 2)
    fit(
        model,
        lambda m, x: m(x).pow(2).mean(),
        lambda s: torch.randn(8, 3, generator=step_generator(0, s)),
        TrainConfig(steps=8, log_every=2, eval_every=4, progress=False),
        out_dir=a / "train",
        eval_fn=lambda m, s: {"norm": float(m.weight.norm())},
    )
    _png(a / "own.png")
    write_json_atomic(
        a / "results.json",
        {
            "name": "exp-a",
            "summary": "Found **x** = 1 with `code` and <tags>.",
            "metrics": {"shared": 1.5, "only_a": 2},
            "tables": [{"title": "T1", "columns": ["k", "v"], "rows": [[1, 0.25], [2, None]]}],
            "figures": [{"file": "own.png", "caption": "its own plot"}],
            "config": {"k": 3},
            "runtime_s": 1.0,
        },
    )
    b = tmp_path_factory.mktemp("run_b")
    write_json_atomic(b / "results.json", {"name": "exp-b", "summary": "b", "metrics": {"shared": 2.5}})
    return a, b


def _images(html: str) -> list[str]:
    return re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)


def test_single_run_report_embeds_every_figure(runs, tmp_path: Path) -> None:
    a, _ = runs
    md, html_path = write_report([a], tmp_path)
    html = html_path.read_text()
    # its own figure + the curves of train/metrics.jsonl
    assert len(_images(html)) == 2
    assert (a / "own.png").read_bytes() in [__import__("base64").b64decode(s) for s in _images(html)]
    assert 'src="' not in html.replace('src="data:', "")  # nothing refers to an outside file
    assert "<strong>x</strong>" in html and "&lt;tags&gt;" in html  # summary markdown, escaped
    text = md.read_text()
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (tmp_path / link).is_file(), link
    assert "| 2 | — |" in text and "| shared | 1.5 |" in text


def test_several_runs_are_compared_side_by_side(runs, tmp_path: Path) -> None:
    md, html_path = write_report(list(runs), tmp_path)
    text = md.read_text()
    assert "| metric | exp-a | exp-b |" in text and "| shared | 1.5 | 2.5 |" in text
    assert "only_a |" not in text.split("## exp-a")[0]  # the comparison keeps shared metrics only
    assert len(_images(html_path.read_text())) == 2  # run b has no figures or curves


def test_curves_come_from_metrics_jsonl(runs) -> None:
    run = load_run(runs[0])
    assert list(run.curves) == ["train"]
    rows = [json.loads(x) for x in (runs[0] / "train" / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        del row["contrastlab_sha256"]  # every row carries its own checksum, verified and dropped on reading
    assert run.curves["train"] == rows and rows[-1]["step"] == 8


def test_a_corrupted_metrics_row_is_refused_and_a_cut_last_row_skipped(runs, tmp_path: Path) -> None:
    from contrastlab.io import CorruptFileError

    lines = (runs[0] / "train" / "metrics.jsonl").read_text().splitlines()
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join([*lines[:-1], lines[-1][:25]]))  # cut mid-row by a crash
    assert [r["step"] for r in load_run(run).curves["train"]] == [2, 4, 6]
    (run / "metrics.jsonl").write_text("\n".join([lines[0].replace('"step": 2', '"step": 3'), *lines[1:]]) + "\n")
    with pytest.raises(CorruptFileError, match=r"metrics.jsonl line 1 is corrupted"):
        load_run(run)


def test_missing_runs_and_figures(runs, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run_dirs"):
        write_report([tmp_path / "empty"], tmp_path)
    with pytest.raises(ValueError, match="run_dirs"):
        write_report([], tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    write_json_atomic(broken / "results.json", {"name": "c", "figures": [{"file": "gone.png", "caption": "x"}]})
    md, _ = write_report([broken], tmp_path / "out")
    assert "gone.png is missing" in md.read_text()


def test_a_corrupted_results_json_is_refused_naming_the_file(runs, tmp_path: Path) -> None:
    from contrastlab.io import CorruptFileError

    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(run / "results.json", {"name": "exp", "metrics": {"shared": 1.5}})
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text.replace('"shared": 1.5', '"shared": 7.5'))  # still valid JSON
    with pytest.raises(CorruptFileError, match=r"results.json is corrupted"):
        write_report([run], tmp_path / "out")
    assert not (tmp_path / "out" / "report.md").exists()


def _audit_results(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        folder / "results.json",
        {
            "name": "audit",
            "summary": f"an audit on a {kind}.",
            "metrics": {"recall@1": 0.5},
            "model": "all-MiniLM-L6-v2",
            "pairs": {"kind": kind},
        },
    )
    return folder


def test_the_report_opens_on_contents_and_the_audit_of_a_real_model(runs, tmp_path: Path) -> None:
    a, b = runs
    real = _audit_results(tmp_path / "real", "pairs file")
    synthetic = _audit_results(tmp_path / "synthetic", "contrastlab run")
    md, html = write_report([a, synthetic, real, b], tmp_path / "report")
    text = md.read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == "Contents"
    assert headings[1] == "audit (real)"  # the real model's audit first, before the overview and the runs given earlier
    assert headings[2] == "Overview"
    assert headings[3:] == ["exp-a", "audit (synthetic)", "exp-b"]  # the others in the order given
    contents = text.split("## Contents\n", 1)[1].split("\n## ", 1)[0].strip().splitlines()
    assert contents[0] == "1. [audit (real)](#audit-real) — audit of a real model"
    assert [line.split("[", 1)[1].split("]", 1)[0] for line in contents] == headings[1:]
    page = html.read_text()
    links = re.findall(r'<li><a href="#([^"]+)">', page)
    ids = re.findall(r'<h2 id="([^"]+)">', page)
    assert links == ids and len(ids) == 5 and len(set(ids)) == 5  # every entry lands on its section
    assert page.index('id="contents"') < page.index('<h2 id="audit-real">') < page.index('<h2 id="overview">')


def test_a_single_run_has_contents_and_an_experiment_with_audits_comes_first(runs, tmp_path: Path) -> None:
    from contrastlab.report import audits_a_real_model

    a, b = runs
    assert audits_a_real_model({"name": "text-finetune", "audits": {"pretrained": "x"}})
    assert not audits_a_real_model({"name": "text-finetune", "audits": {}})
    assert not audits_a_real_model({"name": "demo audit", "model": "an MLP"})
    md, _ = write_report(a, tmp_path / "one")
    assert re.findall(r"^## (.+)$", md.read_text(), flags=re.M) == ["Contents", "exp-a"]
    finetune = tmp_path / "text-finetune"
    write_json_atomic(finetune / "results.json", {"name": "text-finetune", "summary": "s", "audits": {"p": "x"}})
    md, _ = write_report([a, b, finetune], tmp_path / "three")
    assert re.findall(r"^## (.+)$", md.read_text(), flags=re.M)[:3] == ["Contents", "text-finetune", "Overview"]


def test_markdown_in_table_cells_is_rendered_in_the_html(runs, tmp_path: Path) -> None:
    a, _ = runs
    run = tmp_path / "md-run"
    write_json_atomic(
        run / "results.json",
        {
            "name": "norm-dynamics",
            "summary": "**Recursion:** the norm grows on **digits** with `sgd`. Second sentence.",
            "tables": [{"title": "T", "columns": ["**col**", "v"], "rows": [["**bold** and *it*", 1.5], [True, None]]}],
        },
    )
    md, html_path = write_report([a, run], tmp_path / "report")
    page = html_path.read_text()
    overview = page.split('<h2 id="overview">', 1)[1].split("<h2 ", 1)[0]
    assert "<td><strong>Recursion:</strong> the norm grows on <strong>digits</strong> with <code>sgd</code>.</td>" in (
        overview
    )
    assert "**" not in overview and "`" not in overview
    section = page.split('<h2 id="norm-dynamics">', 1)[1]
    assert "<th><strong>col</strong></th>" in section
    assert "<td><strong>bold</strong> and <em>it</em></td>" in section and '<td class="num">1.5</td>' in section
    assert "<td>True</td><td>—</td>" in section
    assert "| **bold** and *it* | 1.5 |" in md.read_text()  # report.md keeps the markdown, which renders there


def test_a_summary_cut_in_the_overview_closes_its_markup() -> None:
    from contrastlab.report.report import _first_sentence

    long = "The **" + "very " * 80 + "bold** claim holds."
    cut = _first_sentence(long, limit=60)
    assert len(cut) <= 62 and cut.endswith("…**") and cut.count("**") == 2
    assert _first_sentence("Short **one**. Next.") == "Short **one**."


def test_every_table_sits_in_a_box_that_scrolls_sideways_by_itself(runs, tmp_path: Path) -> None:
    a, b = runs
    _, html_path = write_report([a, b], tmp_path)
    page = html_path.read_text()
    assert page.count("<table>") == page.count('<div class="table"><table>') > 0
    assert "div.table{max-width:100%;overflow-x:auto}" in page


def test_a_staged_run_is_named_by_the_folder_it_is_shown_as(runs, tmp_path: Path) -> None:
    a, _ = runs
    final = tmp_path / "final"
    md, _ = write_report([a], tmp_path / "rep", shown_as=[final])
    text = md.read_text()
    assert f"folder `{final}`" in text and f"folder `{a}`" not in text
    with pytest.raises(ValueError, match="shown_as must name one folder per run folder"):
        write_report([a], tmp_path / "rep2", shown_as=[final, final])
