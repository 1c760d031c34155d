import json
from pathlib import Path

import pytest

import contrastlab.experiments as experiments
from contrastlab.train import ConfigError

PLUGINS = str(Path(__file__).parent / "plugins")


@pytest.fixture
def with_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, PLUGINS])


def test_discovery_by_module_name(with_tiny: None) -> None:
    assert "tiny-fit" in experiments.list_experiments()
    assert experiments.get_experiment("tiny-fit").QUICK.steps == 12


def test_unknown_experiment_is_named() -> None:
    with pytest.raises(ValueError, match="^name: unknown experiment 'nope'"):
        experiments.get_experiment("nope")


def test_run_experiment_writes_results_and_config(with_tiny: None, tmp_path: Path) -> None:
    res = experiments.run_experiment("tiny-fit", {"temperature": 0.5}, tmp_path, quick=True, overrides={"seed": "2"})
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["config"] == {"steps": 12, "temperature": 0.5, "seed": 2}
    assert json.loads((tmp_path / "config.json").read_text())["config"] == on_disk["config"]
    assert {
        "name",
        "version",
        "runtime_s",
        "timestamp",
        "host",
        "summary",
        "metrics",
        "tables",
        "figures",
    } <= on_disk.keys()
    assert on_disk["metrics"] == res["metrics"] and on_disk["name"] == "tiny-fit"
    assert (tmp_path / "train" / "metrics.jsonl").is_file()


def test_bad_config_fields_are_named(with_tiny: None, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^temprature is not a field"):
        experiments.run_experiment("tiny-fit", {"temprature": 0.5}, tmp_path)
    with pytest.raises(ConfigError, match="^steps must be an int"):
        experiments.resolve_config("tiny-fit", overrides={"steps": "ten"})


def test_default_out_dir_has_name_and_timestamp() -> None:
    d = experiments.default_out_dir("k-gap")
    assert d.parent == Path("runs") and d.name.startswith("k-gap-") and len(d.name) == len("k-gap-20260101-120000")


def test_validate_results_names_the_broken_part(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"figures'\]\[0\]"):
        experiments.validate_results({"figures": [{"file": "x.png", "caption": ""}]}, tmp_path, "e")
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        experiments.validate_results({"tables": [{"title": "t", "columns": ["a", "b"], "rows": [[1]]}]}, tmp_path)
    with pytest.raises(TypeError, match="summary"):
        experiments.validate_results({"summary": 3}, tmp_path)


def test_describe_reads_docstrings_without_importing(with_tiny: None) -> None:
    import sys

    sys.modules.pop("contrastlab.experiments.tiny_fit", None)
    assert experiments.describe_experiments()["tiny-fit"].startswith("Tiny fit: a real")
    assert "contrastlab.experiments.tiny_fit" not in sys.modules
