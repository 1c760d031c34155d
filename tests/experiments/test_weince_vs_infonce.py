"""weince-vs-infonce end to end at a toy size: registry, results contract, tables, figures, honesty checks."""

import json
from dataclasses import replace

import pytest

from contrastlab.experiments import get_experiment, run_experiment
from contrastlab.experiments.weince_vs_infonce import QUICK, Config, run

TINY = replace(
    QUICK,
    losses=("infonce", "weince-code"),
    seeds=(0, 1),
    epochs=1,
    max_steps=2,
    batch_size=32,
    digits_width=4,
    digits_embed_dim=16,
    proj_dim=8,
    top_m=5,
    probe_epochs=3,
    tail_quantile=0.95,
)


def test_registered_and_quick_is_a_config():
    module = get_experiment("weince-vs-infonce")
    assert isinstance(module.QUICK, module.Config)
    assert Config().seeds == (7, 21, 63, 84) and Config().batch_size == 256  # the paper's protocol


def test_tiny_end_to_end(tmp_path):
    res = run_experiment("weince-vs-infonce", TINY, tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["summary"] == res["summary"]
    main, tails = res["tables"][0], res["tables"][1]
    methods = [row[0] for row in main["rows"]]
    assert methods == ["raw pixels", "random encoder", "infonce", "weince-code", "weince-code − infonce"]
    assert all("±" in row[1] for row in main["rows"][1:])  # two seeds: an interval for every method
    m = res["metrics"]
    for k in ("linear_acc", "R@1", "R@20"):
        want = m["digits/weince-code/" + k] - m["digits/infonce/" + k]
        assert m[f"digits/weince-code-infonce/{k}"] == pytest.approx(want)
    assert [row[0] for row in tails["rows"]] == ["infonce", "weince-code"]
    assert all(row[1] < 0.5 for row in tails["rows"])  # a bounded-support tail (ξ̂ < 0 is typical)
    for fig in res["figures"]:
        assert (tmp_path / fig["file"]).stat().st_size > 1000
    assert "WEINCE" in res["summary"] and "random encoder" in res["summary"]
    rows = [
        json.loads(line)
        for line in (tmp_path / "train_digits_weince-code_seed0" / "metrics.jsonl").read_text().splitlines()
    ]
    assert "lambda_mean" in rows[-1] and 0.0 <= rows[-1]["lambda_mean"] <= 1.0


def test_unknown_loss_is_rejected_before_training(tmp_path):
    with pytest.raises(ValueError, match="^losses"):
        run(replace(TINY, losses=("infonce", "nope")), tmp_path)
