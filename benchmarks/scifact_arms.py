"""Which of the four papers' levers pay on real text: MiniLM fine-tunes on SciFact, arm by arm, seed by seed.

Every arm fine-tunes the bundled all-MiniLM-L6-v2 on the train part of :func:`contrastlab.tasks.holdout` of
SciFact's train split (``dev_fraction=0.2, seed=0``; ``../shared/data/scifact-train``, CC BY-NC, read in place)
and is audited on its dev part (the dev queries against the whole corpus, ``contrastlab audit --task_part dev``).
Everything but the arm's own change is fixed beforehand, at sentence-transformers' usual settings: batch 32,
peak learning rate 2e-5, AdamW with weight decay 0.01, 10% linear warm-up then linear decay, 256 tokens, one
pair per relevant abstract, ``--epochs`` passes over the train part's pairs (the same number of steps for
every arm but those given more passes). The arms:

* ``st-mnrl`` — sentence-transformers' trainer, ``MultipleNegativesRankingLoss(scale=20)``, ``NO_DUPLICATES``;
* ``infonce`` — ``contrastlab train``, InfoNCE at τ = 0.05 (= 1/scale), batches without false negatives;
* ``tau-learned`` — the same, τ learned with the encoder from 0.05 (CLIP's log-parameterisation);
* ``weince`` — WEINCE at the paper's defaults (q 0.2, tail fraction 0.1, per-anchor β), τ 0.05;
* ``debiased`` — debiased InfoNCE (Chuang et al. 2020) with τ⁺ = 0.1, τ 0.05;
* ``hn-capped`` — InfoNCE with 3 hard negatives per pair mined by the base model (``contrastlab mine``: the
  train part's distinct abstracts as the corpus, the 3 most similar survivors) whose softmax-search
  probability at τ 0.05 is at most 0.1 (``--max_probability 0.1``: a candidate the search would pick more than
  one time in ten is taken for an unlabelled positive); each query is contrasted with its own 3 negatives
  alone (a pairs file's negative columns are per-anchor negatives), which is support-corrected InfoNCE
  (Zaliaduonis et al. 2026, eq. 8) with the anchor's mined neighbourhood standing for the support K(z) its
  negatives are drawn from: ``--loss.name support_corrected`` is the same call;
* ``hn-uncapped`` — the same negatives without the probability cap;
* ``hn-batch`` — the capped negatives shown to every anchor of the batch beside the batch's positives
  (``data.text.negative_columns: batch``: 32 + 96 candidates, sentence-transformers' MNRL with hard negatives);
* ``hn-batch-r2`` — a second round: ``hn-batch`` again from the base model, its negatives mined (capped) by
  the same seed's ``hn-batch`` model;
* ``gc-128``, ``gc-512`` — InfoNCE on batches of 128 and 512 pairs through gradient caching (mini-batches of
  32), three passes, the learning rate scaled with the square root of the batch (4e-5, 8e-5);
* ``tau-star`` — InfoNCE at τ = 0.039, the τ* the base model's audit fits on the dev part (the mean of its two
  cross-fitted folds, 0.0409 and 0.0375);
* ``st-mnrl-3ep`` — the baseline with three passes: about the training CPU of one pass with three hard
  negatives per pair, so that a hard-negative arm is compared with a baseline of the same budget;
* ``tau-star-3ep`` — ``tau-star`` with three passes: the τ of the softmax search with the passes the baseline
  chose on dev.

The baseline every arm is compared with is whichever sentence-transformers arm (``st-mnrl``, ``st-mnrl-3ep``)
has the best mean dev nDCG@10 over the seeds: its epochs chosen on dev, like every arm's.

``--table`` prints the table of what has finished (each arm's mean dev nDCG@10 over its seeds, its difference
with the baseline over seeds × queries with the 95% two-level bootstrap interval, the seed-random-effect test's
p and its Holm adjustment, mean training CPU and wall time and peak memory, and the audit's diagnostics of the paper:
τ*, the held-out cross-entropy of the softmax search at τ*, the GPD shape ξ̂ of the hardest negatives, the norm
claims) without training anything.

Each (arm, seed) is one subprocess for training and one for the audit, and keeps its output, so a rerun
resumes. At the end every arm whose seeds have all finished is compared with the baseline by ``contrastlab
compare`` over seeds × queries into ``compare-seeds-…`` (the two-level bootstrap and the seed-as-random-effect
test, Holm over the arms; ``--compare`` redoes it without training), and ``--table`` prints each arm's mean dev
nDCG@10, training CPU and wall time and peak memory (from ``results.json``; sentence-transformers': the
child's peak RSS). Wall times are only comparable on a quiet machine.

    python benchmarks/scifact_arms.py --seeds 0 1 2 --out runs/scifact-arms
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, machine, peak_rss_bytes, scifact_train_pairs, st_mnrl_fit

SCIFACT = ROOT.parent / "shared" / "data" / "scifact-train"


@dataclass(frozen=True)
class Arm:
    """One way to fine-tune: a name, what it changes and the ``contrastlab train`` overrides that make it."""

    name: str
    """the arm's name in the table and its folder"""
    change: str
    """what the arm changes, in words"""
    overrides: tuple[str, ...] = field(default_factory=tuple)
    """``--field value`` overrides of the shared job; empty for the sentence-transformers baseline"""
    mine: tuple[str, ...] | None = None
    """``contrastlab mine`` options of the arm's hard negatives (mined once by the base model, the job then reads
    the mined pairs file); None: the task's pairs, no mined negatives"""
    epochs: int = 1
    """passes over the train part's pairs, times ``--epochs``: an arm given more of the compute budget"""
    batch: int = 32
    """pairs per step (a pass is the train part's pairs // ``batch`` steps)"""
    mine_with: str | None = None
    """the arm whose model of the same seed mines the negatives (a second round); None: the base model"""


def _cached(lr: float) -> tuple[str, ...]:
    """Overrides of a large-batch arm: gradient caching in mini-batches of 32 (the memory of batch 32)."""
    return ("--train.embed_minibatch", "32", "--train.optim.lr", str(lr))


ARMS = (
    Arm("st-mnrl", "sentence-transformers MNRL (scale 20, NO_DUPLICATES)"),
    Arm("infonce", "InfoNCE τ 0.05, no false negatives in a batch", ()),
    Arm("tau-learned", "τ learned from 0.05", ("--loss.learnable_temperature", "true")),
    Arm("weince", "WEINCE, the paper's defaults, τ 0.05", ("--loss.name", "weince")),
    Arm(
        "debiased",
        "debiased InfoNCE τ⁺ 0.1, τ 0.05",
        ("--loss.name", "debiased", "--loss.options", "{'tau_plus': 0.1}"),
    ),
    Arm("hn-capped", "3 mined hard negatives, P(c|a) ≤ 0.1", mine=("--max_probability", "0.1")),
    Arm("hn-uncapped", "3 mined hard negatives, no cap", mine=()),
    Arm("tau-star", "InfoNCE at the base model's τ* 0.039", ("--loss.temperature", "0.039")),
    Arm("st-mnrl-3ep", "sentence-transformers MNRL, three passes: the CPU of one pass with 3 hard negatives", epochs=3),
    Arm("tau-star-3ep", "InfoNCE at τ* 0.039, three passes", ("--loss.temperature", "0.039"), epochs=3),
    Arm(
        "hn-batch",
        "3 capped hard negatives shown to the whole batch",
        ("--data.text.negative_columns", "batch"),
        mine=("--max_probability", "0.1"),
    ),
    Arm(
        "hn-batch-r2",
        "hn-batch, negatives mined by its own model",
        ("--data.text.negative_columns", "batch"),
        mine=("--max_probability", "0.1"),
        mine_with="hn-batch",
    ),
    Arm("gc-128", "batch 128 (gradient caching), lr 4e-5, three passes", _cached(4e-5), epochs=3, batch=128),
    Arm("gc-512", "batch 512 (gradient caching), lr 8e-5, three passes", _cached(8e-5), epochs=3, batch=512),
)
#: The order the (arm, seed) runs go in: the baseline pair first, every arm's seeds together.
PRIORITY = (
    "st-mnrl", "infonce", "hn-capped", "weince", "tau-star", "debiased", "hn-uncapped", "st-mnrl-3ep", "tau-star-3ep", "tau-learned",
    "hn-batch", "gc-128", "hn-batch-r2", "gc-512",
)  # fmt: skip
#: The sentence-transformers arms: the baseline is whichever of them scores best on dev (its epochs chosen on dev).
BASELINES = ("st-mnrl", "st-mnrl-3ep")
#: (results.json metric, column) of the audit's diagnostics beside each arm's score.
DIAGNOSTICS = (
    ("tau_star_fold_a", "τ* (fold a)"),
    ("cross_entropy_at_tau_star", "CE at τ*"),
    ("gpd_xi", "GPD ξ̂"),
    ("norm_claim_frequency", "norm ~ frequency ρ"),
    ("auroc_norm", "norm AUROC"),
)


def job_yaml(task: Path, steps: int, mined: Path | None = None, batch: int = 32) -> str:
    """The job every ``contrastlab train`` arm starts from: the task's train part, or a mined pairs file."""
    source = f"""  sources:
    datasets: [{{kind: task, path: "{task}", split: train, part: train, dev_fraction: 0.2, seed: 0}}]"""
    data = f'  name: text\n  text: {{path: "{mined}"}}' if mined else f"  name: sources\n{source}"
    return f"""data:
{data}
  batch_size: {batch}
encoder: {{name: minilm, out_dim: 384, max_seq_length: 256}}
loss: {{name: info_nce, temperature: 0.05}}
train:
  steps: {steps}
  log_every: {steps}
  progress: false
  optim: {{name: adamw, lr: 0.00002, weight_decay: 0.01, warmup_steps: {max(1, steps // 10)}, schedule: linear}}
eval: {{n: 2}}
"""


def cli(*argv: str) -> None:
    """``python -m contrastlab ARGV`` in a child process; raise on failure."""
    subprocess.run([sys.executable, "-m", "contrastlab", *argv], check=True, stdout=subprocess.DEVNULL)


def mined_pairs(arm: Arm, task: Path, out: Path, seed: int) -> Path:
    """The arm's pairs file with hard negatives mined from the train part's pairs (see :attr:`Arm.mine_with`)."""
    model = "minilm" if arm.mine_with is None else str(out / arm.mine_with / f"seed{seed}" / "run")
    mined = out / (f"mined-{arm.name}.jsonl" if arm.mine_with is None else f"mined-{arm.name}-seed{seed}.jsonl")
    if arm.mine_with is not None and not (out / arm.mine_with / f"seed{seed}" / "train.json").is_file():
        raise SystemExit(f"arm {arm.name} mines with {arm.mine_with}'s seed {seed}: train that first")
    if not mined.is_file():
        pairs = out / "train-pairs.jsonl"
        anchors, positives = scifact_train_pairs(task)
        rows = (json.dumps({"anchor": a, "positive": p}) for a, p in zip(anchors, positives, strict=True))
        pairs.write_text("\n".join(rows) + "\n")
        assert arm.mine is not None
        cli("mine", model, "--pairs", str(pairs), "--out", str(mined), "--quiet", "--num_negatives", "3", *arm.mine)
    return mined


def train_arm(arm: Arm, seed: int, folder: Path, job: Path, task: Path, steps: int) -> dict:
    """Train one (arm, seed) into ``folder/run`` (contrastlab) or ``folder/model`` (sentence-transformers)."""
    record_path = folder / "train.json"
    if record_path.is_file():
        return json.loads(record_path.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    if arm.name not in BASELINES:
        cli("train", str(job), "--out", str(folder / "run"), "--quiet", "--train.seed", str(seed), *arm.overrides)
        results = json.loads((folder / "run" / "results.json").read_text())
        peak = results["peak_memory"]["bytes"]
        model = str(folder / "run")
    else:
        argv = ["--st-child", "--task", str(task), "--out", str(folder), "--epochs", str(steps), "--seeds", str(seed)]
        out = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True, text=True).stdout
        peak = json.loads(out.strip().splitlines()[-1])["peak"]
        model = str(folder / "model")
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record = {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak, "model": model, "seed": seed}
    record_path.write_text(json.dumps(record, indent=1))
    return record


def audit(model: str, task: Path, where: Path) -> float:
    """Audit ``model`` on the dev part into ``where``; its nDCG@10."""
    if not (where / "results.json").is_file():
        cli(
            "audit", model, "--task", str(task), "--split", "train", "--task_part", "dev",
            "--out", str(where), "--quiet", "--n_boot", "1000",
        )  # fmt: skip
    return float(json.loads((where / "results.json").read_text())["metrics"]["ndcg_at_10"])


def finished(out: Path, seeds: list[int]) -> dict[str, float]:
    """Each arm whose every seed has its audit: its mean dev nDCG@10, in :data:`PRIORITY` order."""
    means = {}
    for arm in sorted(ARMS, key=lambda a: PRIORITY.index(a.name)):
        audits = [out / arm.name / f"seed{s}" / "audit" / "results.json" for s in seeds]
        if all(a.is_file() for a in audits):
            scores = [json.loads(a.read_text())["metrics"]["ndcg_at_10"] for a in audits]
            means[arm.name] = sum(scores) / len(scores)
    return means


def baseline(means: dict[str, float]) -> str | None:
    """The sentence-transformers arm with the best mean dev nDCG@10: the baseline's epochs, chosen on dev."""
    done = [name for name in BASELINES if name in means]
    return max(done, key=lambda name: means[name]) if done else None


def compare_folder(out: Path, seeds: list[int]) -> Path:
    """Where the comparison over ``seeds`` goes: one folder per set of seeds, so a one-seed look keeps the rest."""
    return out / ("compare-seeds-" + "-".join(str(s) for s in seeds))


def compare_arms(out: Path, seeds: list[int]) -> None:
    """``contrastlab compare`` of every finished arm against the baseline over seeds × queries."""
    means = finished(out, seeds)
    first = baseline(means)
    if first is None or len(means) < 2:
        return
    names = [first] + [name for name in means if name != first]
    models = [f"{name}=" + ",".join(str(out / name / f"seed{s}" / "audit") for s in seeds) for name in names]
    subprocess.run(
        [sys.executable, "-m", "contrastlab", "compare", *models, "--out", str(compare_folder(out, seeds)),
         "--metrics", "ndcg_at_10"],
        check=True,
    )  # fmt: skip


def table(out: Path, seeds: list[int]) -> None:
    """The markdown table of every arm with finished seeds (see the module docstring)."""
    compare = compare_folder(out, seeds) / "results.json"
    found = json.loads(compare.read_text())["comparisons"] if compare.is_file() else []
    rows = {r["other"]: r for r in found if r["metric"] == "ndcg_at_10"}
    first = baseline(finished(out, seeds)) or "st-mnrl"
    head = ["arm", "seeds", "dev nDCG@10", f"Δ vs {first} [95%]", "p", "Holm p", "train CPU", "train wall", "peak mem"]
    print("| " + " | ".join(head + [c for _, c in DIAGNOSTICS]) + " |")
    print("|" + "---|" * (len(head) + len(DIAGNOSTICS)))
    base = out / "base" / "audit" / "results.json"
    if base.is_file():
        m = json.loads(base.read_text())["metrics"]
        cells = ["base (all-MiniLM-L6-v2)", "—", f"{m['ndcg_at_10']:.4f}", "—", "—", "—", "—", "—", "—"]
        print("| " + " | ".join(cells + [f"{m[k]:.4f}" for k, _ in DIAGNOSTICS]) + " |")
    for arm in sorted(ARMS, key=lambda a: PRIORITY.index(a.name)):
        done = [s for s in seeds if (out / arm.name / f"seed{s}" / "audit" / "results.json").is_file()]
        if not done:
            continue
        audits = [json.loads((out / arm.name / f"seed{s}" / "audit" / "results.json").read_text()) for s in done]
        trains = [json.loads((out / arm.name / f"seed{s}" / "train.json").read_text()) for s in done]
        means = {k: sum(a["metrics"][k] for a in audits) / len(audits) for k in ("ndcg_at_10", *dict(DIAGNOSTICS))}
        r = rows.get(arm.name)
        delta = f"{r['difference']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]" if r else "—"
        p = (f"{r['p']:.3g}", f"{r['p_holm']:.3g}") if r else ("—", "—")
        cpu, wall = (sum(t[k] for t in trains) / len(trains) for k in ("cpu_s", "wall_s"))
        peak = sum(t["peak_rss_bytes"] for t in trains) / len(trains) / 2**30
        cells = [arm.name, str(len(done)), f"{means['ndcg_at_10']:.4f}", delta, *p, f"{cpu:.0f} s", f"{wall:.0f} s"]
        cells.append(f"{peak:.2f} GiB")
        print("| " + " | ".join(cells + [f"{means[k]:.4f}" for k, _ in DIAGNOSTICS]) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", type=Path, default=SCIFACT)
    ap.add_argument("--out", type=Path, default=Path("runs/scifact-arms"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=[a.name for a in ARMS], choices=[a.name for a in ARMS])
    ap.add_argument("--table", action="store_true", help="print the table of what has finished, train nothing")
    ap.add_argument("--compare", action="store_true", help="compare what has finished, then print the table")
    ap.add_argument("--st-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.st_child:  # one sentence-transformers fine-tune: --out FOLDER, --epochs STEPS, --seeds SEED
        anchors, positives = scifact_train_pairs(args.task)
        st_mnrl_fit(
            anchors, positives, args.out, max_seq_length=256, batch=32, steps=args.epochs, lr=2e-5, seed=args.seeds[0]
        )
        print(json.dumps({"peak": peak_rss_bytes()}))
        return 0
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if not args.task.is_dir():
        print(f"no SciFact task at {args.task} (give --task DIR)", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.table or args.compare:
        if args.compare:
            compare_arms(args.out.resolve(), args.seeds)
        table(args.out.resolve(), args.seeds)
        return 0
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    task = args.task.resolve()
    steps = args.epochs * (len(scifact_train_pairs(task)[0]) // 32)
    job = out / "job.yaml"
    job.write_text(job_yaml(task, steps))
    print(
        f"# {machine()}; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}; {steps} steps a pass"
    )
    base = audit("minilm", task, out / "base" / "audit")
    print(f"base all-MiniLM-L6-v2: dev nDCG@10 {base:.4f}")
    arms = sorted((a for a in ARMS if a.name in args.arms), key=lambda a: PRIORITY.index(a.name))
    for arm in arms:
        arm_steps = arm.epochs * args.epochs * (len(scifact_train_pairs(task)[0]) // arm.batch)
        for seed in args.seeds:
            arm_job = job
            if arm.mine is not None or arm_steps != steps or arm.batch != 32:
                mined = mined_pairs(arm, task, out, seed) if arm.mine is not None else None
                arm_job = out / (f"job-{arm.name}.yaml" if arm.mine_with is None else f"job-{arm.name}-seed{seed}.yaml")
                arm_job.write_text(job_yaml(task, arm_steps, mined, arm.batch))
            folder = out / arm.name / f"seed{seed}"
            rec = train_arm(arm, seed, folder, arm_job, task, arm_steps)
            score = audit(rec["model"], task, folder / "audit")
            peak = rec["peak_rss_bytes"]
            print(
                f"{arm.name:<12} seed {seed}: dev nDCG@10 {score:.4f}  train {rec['wall_s']:.0f} s wall, "
                f"{rec['cpu_s']:.0f} s CPU, peak {peak / 2**30 if peak else float('nan'):.2f} GiB"
            )
    compare_arms(out, args.seeds)
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
