"""``contrastlab audit --task A --task B``: each task exactly as alone, the table across tasks, compare, refusals."""

import json
from pathlib import Path

import numpy as np
import pytest

from contrastlab.audit import AuditConfig
from contrastlab.audit.run import audit
from contrastlab.audit.task_suite import ACROSS, audit_tasks
from contrastlab.cli import main
from contrastlab.io import read_json_verified
from contrastlab.search.graded import mteb_name
from tests.audit.test_task_audit import write_task
from tests.models.text_models import write_tiny_bert

# what differs between two audits of the same thing: when and how long they ran, the command line, and the
# checksum the file carries of its own content (timing included)
_TIMING = {"evaluation_time", "timing", "runtime_s", "timestamp", "argv", "out_dir", "contrastlab_sha256"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("suite")
    model = write_tiny_bert(base / "model", "st")
    return model, write_task(base / "data" / "toy"), write_task(base / "data" / "toy2", n_docs=50, n_queries=18, seed=3)


def _cfg(model: Path, **kw) -> AuditConfig:
    return AuditConfig(model=str(model), progress=False, n_boot=200, k_max=16, norm_words=40, **kw)


def _without_timing(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in _TIMING}


def test_two_tasks_in_one_audit_equal_two_single_task_audits(tiny: tuple[Path, Path, Path], tmp_path: Path) -> None:
    model, t1, t2 = tiny
    res = audit_tasks(_cfg(model), [str(t1), str(t2)], tmp_path / "both")
    assert [t["folder"] for t in res["tasks"]] == ["toy", "toy2"]
    for task in (t1, t2):
        alone = audit(_cfg(model, task=str(task)), tmp_path / f"alone-{task.name}")
        sub = tmp_path / "both" / task.name
        together = read_json_verified(sub / "results.json")
        assert together["per_query"] == json.loads(json.dumps(alone["per_query"]))  # every query's every score
        assert together["intervals"] == json.loads(json.dumps(alone["intervals"]))
        assert together["config"] == json.loads(json.dumps(alone["config"]))
        mteb_alone = json.loads((tmp_path / f"alone-{task.name}" / "mteb_results.json").read_text())
        mteb_together = json.loads((sub / "mteb_results.json").read_text())
        assert _without_timing(mteb_together) == _without_timing(mteb_alone)
        assert (sub / "report.html").is_file()
    assert (tmp_path / "both" / "results.json").is_file() and (tmp_path / "both" / "report.html").is_file()
    assert read_json_verified(tmp_path / "both" / "results.json")["name"] == "audit_tasks"


def test_the_mean_across_tasks_is_the_mean_of_the_task_means(tiny: tuple[Path, Path, Path], tmp_path: Path) -> None:
    model, t1, t2 = tiny
    res = audit_tasks(_cfg(model), [str(t1), str(t2)], tmp_path / "both")
    subs = [read_json_verified(tmp_path / "both" / name / "results.json") for name in ("toy", "toy2")]
    for m in ACROSS:
        key = mteb_name(m)
        task_means = [s["metrics"][key] for s in subs]
        mean, low, high = res["across_tasks"][key]["mean"]
        assert mean == pytest.approx(np.mean(task_means), abs=1e-12)
        assert res["metrics"][f"mean_{key}"] == mean
        assert low <= mean <= high
        for name, s in zip(("toy", "toy2"), subs, strict=True):
            assert res["across_tasks"][key]["per_task"][name] == s["intervals"][key]
    table = res["tables"][0]
    assert [row[0] for row in table["rows"]] == ["toy", "toy2", "mean over tasks"]
    assert table["rows"][-1][2] == sum(len(s["per_query"]["query_ids"]) for s in subs)


def test_compare_reads_two_multi_task_audits_as_folders_of_per_task_audits(
    tiny: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, t1, t2 = tiny
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "cmp"
    base = ["audit", str(model), "--task", str(t1), "--task", str(t2), "--quiet", "--n_boot", "50", "--k_max", "16"]
    assert main([*base, "--norm_words", "40", "--out", str(a)]) == 0
    assert main([*base, "--norm_words", "40", "--max_seq_length", "6", "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--out", str(out), "--n_boot", "200", "--n_perm", "200"]) == 0
    res = read_json_verified(out / "results.json")
    assert {r["task"] for r in res["comparisons"]} == {"toy (test)", "toy2 (test)"}
    assert {a["tasks"] for a in res["across_tasks"]} == {2}


def test_refusals_are_one_line_and_write_nothing(
    tiny: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, t1, t2 = tiny
    monkeypatch.setenv("CONTRASTLAB_DATA", str(t1.parent))
    out = tmp_path / "bad"
    for argv, expected in (
        (["--task", "toy", "--task", str(t1)], "audit: --task: 'toy' and"),  # a name and a path of one folder
        (["--task", str(t2), "--task", str(t2) + "/"], "are the same task folder"),
        (["--task", str(t1), "--task", "scifact"], "task: 'scifact' is not downloaded"),
        (["--task", str(t1), "--task", str(tmp_path / "nowhere")], "is not a folder"),
        (["--task", str(t1), "--task", str(t2), "--split", "dev"], "split: 'dev' is not a split"),
        (["--all-tasks", "--task", str(t1)], "give it or --task, not both"),
        (["--task", "toy", "toy2"], "audit: --task takes one task; for several, repeat it: --task toy --task toy2"),
        (
            ["--task", "toy,toy2"],
            "audit: --task toy,toy2: one task per --task; for several, repeat it: --task toy --task toy2",
        ),
    ):
        code = main(["audit", str(model), *argv, "--out", str(out), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and expected in err and "\n" not in err, err
        assert not out.exists()
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path / "empty"))
    assert main(["audit", str(model), "--all-tasks", "--out", str(out), "--quiet"]) == 2
    assert "no task under the data root" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match="tasks: name at least one task"):
        audit_tasks(_cfg(model), [], out)
    with pytest.raises(ValueError, match="names the task"):
        audit_tasks(_cfg(model, task=str(t1)), [str(t2)], out)
    assert not out.exists()


def test_all_tasks_audits_every_task_under_the_data_root(
    tiny: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model, t1, _ = tiny
    monkeypatch.setenv("CONTRASTLAB_DATA", str(t1.parent))
    out = tmp_path / "all"
    assert (
        main(["audit", str(model), "--all-tasks", "--quiet", "--n_boot", "50", "--k_max", "16", "--out", str(out)]) == 0
    )
    assert "mean over tasks" in capsys.readouterr().out
    res = read_json_verified(out / "results.json")
    assert [t["folder"] for t in res["tasks"]] == ["toy", "toy2"]
