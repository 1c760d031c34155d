"""``--task scifact``: a path first, then the data root; a task not yet fetched names the command that fetches it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrastlab.config import ConfigError
from contrastlab.tasks import read_beir_task, tasks_under
from contrastlab.tasks.resolve import resolve_task_path
from contrastlab.train.job.sources_config import SourceConfig
from contrastlab.train.job.text_sources import read_source


def _task(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "Cats purr."}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what purrs"}) + "\n")
    (root / "qrels").mkdir()
    for split in ("train", "test"):
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


def test_a_name_resolves_under_the_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _task(tmp_path / "data" / "scifact")
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    assert resolve_task_path("scifact") == tmp_path / "data" / "scifact"
    task = read_beir_task("scifact", "test")
    assert task.name == "scifact" and task.provenance["path"] == str((tmp_path / "data" / "scifact").resolve())


def test_a_path_that_exists_is_used_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _task(tmp_path / "data" / "scifact")
    here = _task(tmp_path / "cwd" / "scifact")
    (here / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "the local one"}) + "\n")
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path / "cwd")
    assert read_beir_task("scifact", "test").query_texts == ("the local one",)


def test_a_task_not_downloaded_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=rf"`contrastlab data get scifact --root {tmp_path / 'data'}`"):
        read_beir_task("scifact", "test")
    with pytest.raises(ValueError, match="`contrastlab data get cqadupstack"):
        read_beir_task("cqadupstack/android", "test")
    with pytest.raises(ValueError, match="is not a folder"):  # not a task data get knows: the reader's own message
        read_beir_task("my-own-task", "test")


def test_a_training_source_names_a_task_under_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _task(tmp_path / "root" / "scifact")
    pairs = read_source(SourceConfig(path="scifact", kind="task"), "data.sources.datasets[0]", str(tmp_path / "root"))
    assert pairs.rows == (("what purrs", "Cats purr."),)
    with pytest.raises(ConfigError, match=r"datasets\[0\].path: .*`contrastlab data get nfcorpus --root "):
        read_source(SourceConfig(path="nfcorpus", kind="task"), "data.sources.datasets[0]", str(tmp_path / "root"))
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "root"))  # no data.root: the environment's root
    assert len(read_source(SourceConfig(path="scifact", kind="task"), "d", None)) == 1


def test_the_audit_command_names_the_fetch_command_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from contrastlab.cli import main

    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    code = main(["audit", "minilm", "--task", "scifact", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert f"`contrastlab data get scifact --root {tmp_path / 'data'}`" in err
    assert not (tmp_path / "out").exists()


def test_tasks_under_the_data_root_are_found_one_and_two_folders_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    _task(root / "scifact")
    _task(root / "cqadupstack" / "android")
    _task(root / ".cache" / "scifact")  # a download's cache: never a task
    (root / "notes").mkdir()
    monkeypatch.setenv("CONTRASTLAB_DATA", str(root))
    assert tasks_under() == [root / "scifact", root / "cqadupstack" / "android"]
    assert tasks_under(tmp_path / "missing") == []
