import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_benchmark_smoke(tmp_path):
    out = tmp_path / "b.json"
    args = ["--n", "3000", "--d", "16", "--queries", "200", "--lse-queries", "50", "--block", "700", "--threads", "1"]
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search.py"), *args, "--json", str(out)], check=True)
    res = json.loads(out.read_text())
    assert res["topk"]["contrastlab_ip_same_ids"] == 1.0
    lse = res["log_partition"]
    assert lse["stream_max_rel_err_vs_float32_logsumexp"] < 1e-5
    assert lse["stream_rss_mib"] < 1024 and lse["floor_rss_mib"] <= lse["memory_rss_mib"]
    assert lse["top10_bound_holds"] and lse["top1000_bound_holds"]
