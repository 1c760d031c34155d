"""Every input the coverage-guided campaign (``fuzz/run.py``) saved as a finding now keeps the contract.

``fuzz/findings/FAMILY/`` holds one input per distinct violation signature (``<signature>.bin``, its
traceback in ``.txt``) and libFuzzer's ``crash-*``/``timeout-*``/``oom-*`` artifacts; each is replayed
here under the memory cap and time limit. The named regression tests next to each reader's fuzz tests
rebuild the same inputs by construction.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.targets import FAMILIES
from tests._fuzzing import assert_contract

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = sorted(
    p
    for p in (ROOT / "fuzz" / "findings").glob("*/*")
    if p.suffix == ".bin" or p.name.split("-")[0] in ("crash", "timeout", "oom", "slow")
)


@pytest.mark.parametrize("path", FINDINGS, ids=[f"{p.parent.name}/{p.name[:20]}" for p in FINDINGS])
def test_finding_keeps_the_contract(path: Path) -> None:
    assert assert_contract(path.parent.name, path.read_bytes()) in ("ok", "error")


SUMMARIES = sorted((ROOT / "fuzz" / "findings").glob("*/summary.json"))


@pytest.mark.parametrize("summary", SUMMARIES, ids=[p.parent.name for p in SUMMARIES])
def test_campaign_summary_is_well_formed(summary: Path) -> None:
    record = json.loads(summary.read_text())
    assert record["family"] == summary.parent.name and record["family"] in FAMILIES
    assert record["executions"] > 0 and record["wall_seconds"] > 0 and record["coverage_edges"] > 0


def test_replay_command_reports_each_input(tmp_path: Path) -> None:
    from fuzz.targets import seed_inputs

    seed = tmp_path / "seed.bin"
    seed.write_bytes(seed_inputs(FAMILIES["cifar10h"])[0])
    out = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "run.py"), "cifar10h", "--replay", str(seed)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0 and out.stdout.strip() == f"{seed}: ok"
