"""Run a quick job and a job that never ends on two workers under a plain board; exit 130 on Ctrl-C.

``python tests/experiments/_interrupt_run.py DIR``: the test sends SIGINT once the quick job is done.
"""

from __future__ import annotations

import sys
from pathlib import Path

from contrastlab.experiments._parallel import Job, run_in_workers
from contrastlab.progress import Board, Task
from tests.experiments._jobs import sleep_forever, square

if __name__ == "__main__":
    root = Path(sys.argv[1])
    jobs = [
        Job("slow", sleep_forever, (str(root / "slow.pid"),), root / "slow.log"),
        Job("quick", square, (3,), root / "quick.log"),
        Job("third", square, (4,), root / "third.log"),
    ]
    board = Board("t", [Task(j.name) for j in jobs], workers=2, mode="plain", heartbeat_s=3600)
    with board:
        outcomes, interrupted = run_in_workers(jobs, board, 2, grace_s=10)
    print("; ".join(board.summary()), file=sys.stderr)
    print({n: o.state for n, o in outcomes.items()}, file=sys.stderr)
    sys.exit(130 if interrupted else 0)
