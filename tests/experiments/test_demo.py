import json

from contrastlab.experiments import run_experiment


def test_demo_tiny_end_to_end(tmp_path):
    res = run_experiment(
        "demo",
        {
            "steps": 30,
            "eval_size": 256,
            "batch_size": 64,
            "hidden": [32],
            "k_gap_groups": 4,
            "papers": ["continuity-bound"],
            "workers": 1,
        },
        tmp_path,
        quick=True,
    )
    table = res["tables"][0]
    assert table["columns"] == ["metric", "random encoder", "trained encoder", "ground truth g⁻¹"]
    r2 = {row[0]: row[1:] for row in table["rows"]}["linear_r2"]
    assert r2[2] > 0.999  # g⁻¹ recovers the latents exactly
    assert (tmp_path / "audit" / "k_gap.png").stat().st_size > 0
    assert json.loads((tmp_path / "continuity-bound" / "results.json").read_text())["name"] == "continuity-bound"
    html = (tmp_path / "report" / "report.html").read_text()
    assert "continuity-bound" in html and "data:image/png;base64" in html
    assert res["tables"][1]["rows"][0][2] == "ok"
