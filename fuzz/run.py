"""Coverage-guided fuzzing of one reader family with atheris (libFuzzer for Python), outside the test suite.

Usage::

    pip install -e '.[fuzz]'                       # atheris
    OMP_NUM_THREADS=1 nice -n 15 python fuzz/run.py index --seconds 600

The parent process seeds ``fuzz/corpus/FAMILY/`` (``fuzz/make_corpus.py``) when it is empty, then runs
the fuzzer in a child process until ``--seconds`` have passed, restarting it when libFuzzer stops on a
native crash, a timeout or an out-of-memory. The child checks every input against the contract of
``fuzz/targets.py`` and, on a violation, saves the input as ``fuzz/findings/FAMILY/<signature>.bin`` with
its traceback in ``<signature>.txt`` (one file per distinct signature: exception type and the innermost
frame) and goes on fuzzing. libFuzzer's own artifacts (``crash-*``, ``timeout-*``, ``oom-*``) land in
the same folder. At the end ``fuzz/findings/FAMILY/summary.json`` records the executions, wall time,
coverage (libFuzzer's ``cov``, covered edges of the instrumented Python code, and ``ft``, features), the
corpus size and the findings.

Replay saved inputs (e.g. after a fix) with ``python fuzz/run.py FAMILY --replay FILE...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# Python code instrumented for coverage: the readers and the pure-Python parsers they call. Packages
# imported fresh in the child are instrumented on import; modules that numpy/torch load at import time
# are instrumented function by function.
INSTRUMENT_ON_IMPORT = ["contrastlab", "fuzz", "yaml", "tomllib", "scipy.io", "PIL", "safetensors"]
INSTRUMENT_LOADED = [
    "numpy.lib._format_impl",
    "numpy.lib._npyio_impl",
    "json.decoder",
    "pickle",
    "zipfile",
    "torch.serialization",
    "torch._weights_only_unpickler",
]
MEMORY_BUDGET = 2 << 30  # bytes of address space a single read may add (RLIMIT_AS)
STATUS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")


def _signature(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    tb = traceback.extract_tb(cause.__traceback__)
    where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
    return hashlib.sha1(f"{type(cause).__name__}@{where}".encode()).hexdigest()[:12]


def child(family_name: str, findings: Path, libfuzzer_args: list[str]) -> None:
    """Run atheris in this process (libFuzzer parses ``libfuzzer_args``)."""
    import importlib
    import inspect

    import atheris
    import faiss  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401

    for name in INSTRUMENT_LOADED:
        module = importlib.import_module(name)
        for obj in list(vars(module).values()):
            members = vars(obj).values() if inspect.isclass(obj) and obj.__module__ == name else [obj]
            for fn in members:
                if inspect.isfunction(fn) and fn.__module__ == name:
                    atheris.instrument_func(fn)

    with atheris.instrument_imports(include=INSTRUMENT_ON_IMPORT):
        import PIL.Image  # noqa: F401
        import scipy.io  # noqa: F401
        import yaml  # noqa: F401

        from fuzz.targets import FAMILIES, ContractViolation, check, memory_cap

        family = FAMILIES[family_name]
        # import every module the reader touches before fuzzing starts (so that it is instrumented too)
        with tempfile.TemporaryDirectory() as tmp:
            family.seeds(Path(tmp) / "warm", 0)
            family.read(Path(tmp) / "warm")

    workdir = Path(tempfile.mkdtemp(prefix=f"fuzz-{family_name}-"))
    seen = {p.stem for p in findings.glob("*.bin")}

    def one_input(data: bytes) -> None:
        try:
            check(family, data, workdir, seconds=0)  # libFuzzer's -timeout catches hangs
        except ContractViolation as v:
            sig = _signature(v)
            if sig in seen:
                return
            seen.add(sig)
            (findings / f"{sig}.bin").write_bytes(data)
            text = "".join(traceback.format_exception(v.__cause__ or v))
            (findings / f"{sig}.txt").write_text(f"{v}\n\n{text}", encoding="utf-8")
            print(f"FINDING {sig}: {str(v)[:300]}", file=sys.stderr, flush=True)

    with memory_cap(MEMORY_BUDGET):
        atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
        atheris.Fuzz()


def parent(family: str, seconds: float, corpus: Path, findings: Path, timeout: int) -> dict[str, object]:
    """Fuzz ``family`` for ``seconds`` of wall time, restarting the child after native crashes."""
    from fuzz.make_corpus import write_seeds

    if not corpus.is_dir() or not any(corpus.iterdir()):
        write_seeds(family, corpus)
    findings.mkdir(parents=True, exist_ok=True)
    max_len = max(4096, 2 * max(p.stat().st_size for p in corpus.iterdir()))
    start = time.monotonic()
    executions, restarts, last_status = 0, 0, (0, 0, 0)
    stops: list[str] = []
    log_path = findings / "fuzz.log"
    with open(log_path, "w", encoding="utf-8") as log:
        while (left := seconds - (time.monotonic() - start)) > 5:
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                family,
                "--child",
                f"--findings={findings}",
                f"-max_len={max_len}",
                f"-max_total_time={int(left)}",
                f"-timeout={timeout}",
                "-rss_limit_mb=4096",
                f"-artifact_prefix={findings}/",
                "-print_final_stats=1",
                str(corpus),
            ]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert proc.stdout is not None
            child_execs = 0
            for line in proc.stdout:
                log.write(line)
                m = STATUS.match(line)
                if m:
                    child_execs = int(m.group(1))
                    last_status = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
                if line.startswith("stat::number_of_executed_units:"):
                    child_execs = int(line.rsplit(":", 1)[1])
                if line.startswith("==") and "ERROR: libFuzzer" in line or "SUMMARY: libFuzzer" in line:
                    stops.append(line.strip())
            rc = proc.wait()
            executions += child_execs
            if rc == 0:
                break
            restarts += 1
    wall = time.monotonic() - start
    found = []
    for txt in sorted(findings.glob("*.txt")):
        found.append({"input": txt.with_suffix(".bin").name, "violation": txt.read_text().splitlines()[0][:400]})
    for art in sorted(findings.iterdir()):
        if art.name.split("-")[0] in ("crash", "timeout", "oom", "leak", "slow"):
            found.append({"input": art.name, "violation": "libFuzzer artifact (see fuzz.log)"})
    summary: dict[str, object] = {
        "family": family,
        "wall_seconds": round(wall, 1),
        "executions": executions,
        "executions_per_second": round(executions / wall, 1) if wall else 0.0,
        "coverage_edges": last_status[0],
        "coverage_features": last_status[1],
        "corpus_inputs": last_status[2],
        "restarts": restarts,
        "libfuzzer_stops": stops,
        "findings": found,
    }
    (findings / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def replay(family_name: str, files: list[str]) -> int:
    """Check saved inputs against the contract; exit status 1 if any still violates it."""
    from fuzz.targets import FAMILIES, ContractViolation, check, memory_cap

    family = FAMILIES[family_name]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            try:
                with memory_cap(MEMORY_BUDGET):
                    outcome = check(family, Path(f).read_bytes(), Path(tmp))
                print(f"{f}: {outcome}")
            except ContractViolation as v:
                bad += 1
                print(f"{f}: VIOLATION {str(v)[:300]}")
    return 1 if bad else 0


def main() -> int:
    """Fuzz one family (parent), run the atheris child, or replay saved inputs."""
    if "--child" in sys.argv:  # before anything imports the readers, so that they are instrumented on import
        family, findings = sys.argv[1], sys.argv[sys.argv.index("--child") + 1].split("=", 1)[1]
        child(family, Path(findings), [a for a in sys.argv[2:] if not a.startswith("--")])  # libFuzzer's own
        return 0
    from fuzz.targets import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("--seconds", type=float, default=600.0, help="wall-clock budget (default 600)")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take (libFuzzer -timeout)")
    parser.add_argument("--corpus", default=None, help="default fuzz/corpus/FAMILY")
    parser.add_argument("--findings", default=None, help="default fuzz/findings/FAMILY")
    parser.add_argument("--replay", nargs="+", default=None, metavar="FILE", help="check saved inputs and exit")
    args = parser.parse_args()
    corpus = Path(args.corpus or HERE / "corpus" / args.family)
    findings = Path(args.findings or HERE / "findings" / args.family).resolve()
    if args.replay:
        return replay(args.family, args.replay)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    summary = parent(args.family, args.seconds, corpus, findings, args.timeout)
    print(json.dumps({k: v for k, v in summary.items() if k != "findings"}))
    print(f"{len(summary['findings'])} finding(s) in {findings}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
