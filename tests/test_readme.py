"""The README a newcomer acts on: its first screen, its commands, its links; no count that can go stale."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from contrastlab import cli
from contrastlab.cli._options import split_arguments
from contrastlab.cli.train import load_job

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = sorted((REPO / "docs").glob("*.md"))
FIRST_SCREEN = 30  # lines


def _commands() -> list[list[str]]:
    """Every ``contrastlab ...`` command of the README's bash blocks (a line ending in ``\\`` goes on to the next),
    split like a shell, comments dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "contrastlab":
                out.append(words[1:])
    return out


def _anchors(md: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    found = set()
    for title in re.findall(r"^#+ (.+)$", md, flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-"))
    return found


def test_the_first_screen_says_what_it_is_gives_the_two_commands_and_a_figure() -> None:
    screen = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "make demo" in screen and "make test" in screen
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", screen)
    assert images, "no figure on the first screen"
    for image in images:
        assert (REPO / image).is_file() and (REPO / image).stat().st_size > 10_000, image
    assert README.index("## Common tasks") < README.index("## Read next")
    for task in (
        "Audit a model",
        "Audit on a BEIR task",
        "Compare two models",
        "Mine hard negatives",
        "Train from a config",
        "Search an index",
    ):
        assert f"**{task}**" in README


def test_no_count_of_tests_that_can_go_stale() -> None:
    assert not re.search(r"\d[\d,]*\s+(tests|test cases)\b", README)


def test_every_link_of_the_readme_and_the_docs_resolves() -> None:
    for md in [REPO / "README.md", *DOCS]:
        text = md.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = md if not path else (md.parent / path)
            assert dest.exists(), f"{md.name}: {target} does not exist"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest.read_text(encoding="utf-8")), f"{md.name}: no heading for {target}"


def test_every_command_of_the_readme_exists(capsys: pytest.CaptureFixture[str]) -> None:
    _, subs = cli.build_parser()
    commands = _commands()
    assert {c[0] for c in commands} >= {"audit", "train", "mine", "report", "search"}
    for words in commands:
        name = words[0]
        if name == "mine" and name not in subs:
            continue  # checked by test_the_mine_command_exists, skipped where this build has no mine command
        prefix = [name, words[1]] if name == "search" else [name]
        assert _help_exit_code([*prefix, "--help"]) == 0, words
    capsys.readouterr()


def _help_exit_code(argv: list[str]) -> int | str | None:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's --help exits 0; an unknown command would exit 2
        return e.code


def test_the_mine_command_exists() -> None:
    _, subs = cli.build_parser()
    if "mine" not in subs:
        pytest.skip("this build has no `contrastlab mine` command")
    assert _help_exit_code(["mine", "--help"]) == 0


def test_every_train_command_of_the_readme_loads_its_config_with_its_overrides() -> None:
    trains = [c for c in _commands() if c[0] == "train"]
    assert trains
    _, subs = cli.build_parser()
    for words in trains:
        config, rest = words[1], words[2:]
        # the command's own options (--out, --engine, --workers, ...) as its parser knows them; the rest are fields
        _, overrides, _ = split_arguments(subs["train"], rest)
        job = load_job(str(REPO / config), overrides)
        assert job is not None


def test_the_readme_data_get_commands_run_against_a_local_mirror(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``contrastlab data get NAME`` of the README, served by a local HTTP server through ``--mirror``.

    The served zip is one this test builds, so the catalogue's published checksum is swapped for its own: what
    runs is the README's command line, the transfer, the verification, the unpacking and the task lookup by
    name that the README's next command relies on.
    """
    from dataclasses import replace

    from contrastlab.data.catalog import DOWNLOADS, RemoteFile
    from contrastlab.tasks import read_beir_task
    from tests.data.http_server import Served, md5, serve, task_zip

    gets = [c for c in _commands() if c[:2] == ["data", "get"]]
    assert gets, "the README shows no `contrastlab data get`"
    by_name = [c for c in _commands() if c[0] == "audit" and "--task" in c and "/" not in c[c.index("--task") + 1]]
    assert by_name, "the README shows no `--task NAME`"
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    with serve(Served()) as srv:
        for words in gets:
            name = words[2]
            if srv.files.get(f"/{name}.zip") is None:  # a name the README gets twice is served once, the same bytes
                data = task_zip(name)
                srv.files[f"/{DOWNLOADS[name].files[0].name}"] = data
                monkeypatch.setitem(
                    DOWNLOADS, name, replace(DOWNLOADS[name], files=(RemoteFile(f"{name}.zip", md5=md5(data)),))
                )
            assert cli.main([*words, "--mirror", srv.url, "--quiet"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    for words in by_name:
        task = words[words.index("--task") + 1]
        split = words[words.index("--split") + 1] if "--split" in words else "test"
        assert read_beir_task(task, split).name == task


def _beir_zip(folder: Path, name: str) -> bytes:
    """A zip of the task ``folder`` laid out as BEIR's (``<name>/corpus.jsonl``, …), its test qrels also its train."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
            zf.writestr(f"{name}/{f}", (folder / f).read_text())
        zf.writestr(f"{name}/qrels/train.tsv", (folder / "qrels" / "test.tsv").read_text())
    return buf.getvalue()


def test_the_readmes_task_path_runs_from_a_clean_data_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's commands on tasks by name, in its order, from an empty data root and a local mirror.

    ``data get`` runs as written (through ``--mirror``, serving a small task this test writes); a ``train`` on
    tasks reads every task source and dev set of its config with its overrides (what it reads first; training
    MiniLM is not run); each ``audit --task NAME`` runs as written with a tiny model in place of the model it
    names (one for the bundled MiniLM, another for anything else), and each ``compare`` of those audits runs.
    """
    from dataclasses import replace

    from contrastlab.data.catalog import DOWNLOADS, RemoteFile
    from contrastlab.train.job.dev_metrics import read_dev
    from contrastlab.train.job.text_sources import read_source
    from tests.audit.test_task_audit import write_task
    from tests.data.http_server import Served, md5, serve
    from tests.models.text_models import write_tiny_bert

    models = {
        "minilm": write_tiny_bert(tmp_path / "tiny-a", "st"),
        "": write_tiny_bert(tmp_path / "tiny-b", "st", seed=1),
    }
    source = {
        "scifact": write_task(tmp_path / "src" / "scifact"),
        "nfcorpus": write_task(tmp_path / "src" / "nf", seed=3),
    }
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("CONTRASTLAB_DATA", str(work / "data"))
    monkeypatch.chdir(work)
    fast = ["--quiet", "--n_boot", "50", "--k_max", "16", "--norm_words", "40"]
    ran: list[str] = []
    audited: set[str] = set()
    with serve(Served()) as srv:
        for words in _commands():
            if words[:2] == ["data", "get"]:
                name = words[2]
                if srv.files.get(f"/{name}.zip") is None:  # a second `data get` of a name finds it verified
                    data = _beir_zip(source[name], name)
                    srv.files[f"/{DOWNLOADS[name].files[0].name}"] = data
                    spec = replace(DOWNLOADS[name], files=(RemoteFile(f"{name}.zip", md5=md5(data)),))
                    monkeypatch.setitem(DOWNLOADS, name, spec)
                assert cli.main([*words, "--mirror", srv.url, "--quiet"]) == 0, capsys.readouterr().err
                ran.append(f"data get {name}")
            elif words[0] == "train":
                _, subs = cli.build_parser()
                _, overrides, _ = split_arguments(subs["train"], words[2:])
                job = load_job(str(REPO / words[1]), overrides)
                tasks = [s for s in job.data.sources.datasets if s.kind == "task"] if job.data.name == "sources" else []
                if not tasks:
                    continue
                for i, src in enumerate(tasks):
                    assert read_source(src, f"data.sources.datasets[{i}]", job.data.root).rows
                if job.select.dev.kind == "task":
                    assert read_dev(job.select.dev, job.data.root) is not None
                ran.append(f"train {words[1]}")
            elif words[0] == "audit" and "--task" in words:
                given = [words[i + 1] for i, w in enumerate(words) if w == "--task"]
                if any("/" in t for t in given):
                    continue  # a folder of the reader's own
                model = words[1] if not words[1].startswith("-") else "minilm"
                rest = words[2:] if not words[1].startswith("-") else words[1:]
                argv = ["audit", str(models.get(model, models[""])), *rest, *fast]
                assert cli.main(argv) == 0, capsys.readouterr().err
                out = words[words.index("--out") + 1]
                if len(given) > 1:  # one audit folder per task, and the table across them
                    assert all((work / out / t / "mteb_results.json").is_file() for t in given)
                    assert (work / out / "results.json").is_file()
                audited.add(out)
                ran.append(f"audit {' '.join(given)}")
            elif words[0] == "compare" and all(
                w in audited for i, w in enumerate(words[1:], 1) if not w.startswith("-") and words[i - 1] != "--out"
            ):
                out = words[words.index("--out") + 1]
                assert cli.main([*words, "--n_boot", "200", "--n_perm", "200"]) == 0, capsys.readouterr().err
                assert (work / out / "results.json").is_file()
                ran.append("compare")
    capsys.readouterr()
    for step in (
        "data get scifact",
        "train configs/scifact_minilm_select.yaml",
        "audit scifact",
        "audit scifact nfcorpus",
        "compare",
    ):
        assert step in ran, f"the README's path on tasks lacks `{step}`: it ran {ran}"
