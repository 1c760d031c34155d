"""The main job: audit an encoder on a world whose latents we know, then run the four papers' claims.

Train a contrastive encoder on a synthetic world, audit it, run the four papers' experiments in their
quick form, and write one report over everything.

Part 1 (the audit). The world (Zimmermann et al. 2021; Whiteley 2026 §1.4): latents z uniform on
S^{d−1}, positives z̃ ~ vMF(z, κ), observations x = g(z) through a fixed random invertible
leaky-ReLU MLP. An MLP encoder is trained with InfoNCE (in-batch negatives) at τ = 1/κ, the
temperature at which the theory says the minimiser recovers z up to an orthogonal map (Zaliaduonis
et al. 2026, Thm 4.4). A table compares three encoders on held-out samples — randomly initialised,
trained, and the ground truth φ* = g⁻¹ — on the held-out InfoNCE loss, alignment and uniformity
(Wang & Isola 2020), top-1 retrieval of each anchor's positive among all held-out positives, and the
linear R² of the true latents. The k-gap plot (Whiteley Props. 1–2) of the trained encoder follows.

Part 2 (the papers, and a real model on real text). Each experiment in ``papers`` runs with its
``--quick`` setting, two at a time on separate processes (one thread each), into ``out_dir/<name>``
(its printed output into ``out_dir/<name>/output.log``);
``text-finetune`` among them audits the bundled all-MiniLM-L6-v2 on the docstring corpus, fine-tunes it
briefly with InfoNCE and audits it again. ``out_dir/report`` then holds ``report.md`` and a
self-contained ``report.html`` over the audit and every paper run.

While it runs, a board on stderr shows what runs, for how long, and the time left estimated from the
recorded durations (:mod:`contrastlab.progress`): live in a terminal, plain lines in a log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from contrastlab import figures
from contrastlab.eval.identifiability import linear_r2
from contrastlab.io import write_json_atomic
from contrastlab.losses import alignment, info_nce, uniformity
from contrastlab.losses._common import l2_normalize
from contrastlab.models import MLP
from contrastlab.seeds import stream_generator
from contrastlab.train import OptimConfig, TrainConfig, fit, step_generator
from contrastlab.worlds import SphereWorld
from contrastlab.worlds.mixing import make_mixing

#: The papers' experiments the demo runs in their quick form (one line per claim; see docs/results.md).
PAPERS: tuple[str, ...] = (
    # roughly longest first, so that the two workers, each taking the next one free, finish together (the
    # quick runs' wall times on the reference machine: contrastlab.experiments._durations.REFERENCE_QUICK_S;
    # the demo's wall time is bounded below by the first)
    "augmentation-diversity",  # Zaliaduonis et al. §4.3: augmentation regimes × encoder architectures
    "weince-vs-infonce",  # WEINCE: extreme-value-corrected InfoNCE against InfoNCE on digits
    "text-finetune",  # a real model on real text: audit all-MiniLM-L6-v2, fine-tune it, audit it again
    "constraint-ratio",  # the support-corrected loss as a function of the constraint ratio ρ
    "norms-vs-uncertainty",  # Su, Ren & Veitch: norms against (blended-digit / CIFAR-10H) human uncertainty
    "norm-calibration",  # the norm as a confidence for retrieval
    "identifiability-table",  # Zaliaduonis et al. Table 1: diversity holds / violated / corrected / inverse
    "norm-dynamics",  # the norm recursion; frequency and specificity in the norm
    "k-gap",  # Whiteley: the O(1/k) gap between the InfoNCE risk and the similarity-search CE
    "generalisation-vs-k",  # Whiteley Thm 1: the generalisation gap against k
    "continuity-bound",  # Whiteley Prop. 4 on random encoder pairs
)


@dataclass(frozen=True)
class Config:
    """Settings of the demo (the world, the encoder, the training run, and which papers to run)."""

    latent_dim: int = 5
    """d: latents live on the sphere S^{d−1}"""
    kappa: float = 20.0
    """concentration κ of the vMF positive generator"""
    mixing: str = "mlp"
    """the generator g: identity, linear, spiral, patches or mlp (contrastlab.worlds.mixing)"""
    mixing_seed: int = 1
    """seed of g's random weights"""
    hidden: tuple[int, ...] = (128, 128, 128)
    """hidden widths of the MLP encoder"""
    embed_dim: int = 5
    """embedding dimension D (= d lets the encoder recover z up to a rotation)"""
    temperature: float = 0.05
    """InfoNCE temperature τ (1/κ is the matched value)"""
    batch_size: int = 256
    """anchors per step; each anchor's negatives are the other anchors' positives"""
    steps: int = 2000
    """optimiser steps"""
    lr: float = 1e-3
    """Adam learning rate"""
    eval_size: int = 2000
    """held-out anchor/positive pairs for the evaluation table"""
    seed: int = 0
    """seed of the encoder's initialisation and of every batch"""
    k_gap_groups: int = 96
    """groups of the paired k-gap estimator for the audit's k-gap plot (Whiteley Props. 1–2)"""
    papers: tuple[str, ...] = PAPERS
    """the papers' experiments to run in their --quick form after the audit (empty: the audit only)"""
    workers: int = 2
    """processes running the papers' experiments side by side (one torch thread each)"""


QUICK = Config(steps=800, eval_size=1000, papers=())


def evaluate(encoder: nn.Module | Any, x: Tensor, x_pos: Tensor, z: Tensor, temperature: float) -> dict[str, float]:
    """Held-out metrics of one encoder: loss, alignment, uniformity, top-1 retrieval, linear R²."""
    with torch.no_grad():
        e, e_pos = encoder(x).float(), encoder(x_pos).float()
        u, u_pos = l2_normalize(e), l2_normalize(e_pos)
        top1 = (u @ u_pos.T).argmax(dim=1).eq(torch.arange(x.shape[0])).float().mean()
        return {
            "infonce_loss": float(info_nce(e, e_pos, temperature=temperature)),
            "alignment": float(alignment(e, e_pos)),
            "uniformity": float(uniformity(e)),
            "top1_retrieval": float(top1),
            "linear_r2": float(linear_r2(z, u)),
        }


def audit(config: Config, out_dir: Path) -> dict[str, Any]:
    """Part 1: train on the sphere world, evaluate beside a random encoder and g⁻¹, plot the k-gap."""
    from contrastlab.experiments._k_gap import k_gap_figure

    g = make_mixing(config.mixing, config.latent_dim, seed=config.mixing_seed)
    world = SphereWorld(d=config.latent_dim, kappa=config.kappa, mixing=g, inverse=g.inverse, seed=config.seed)

    # TRY NOT TO MODIFY: seeding — every batch is a pure function of (seed, step).
    def batch_at(step: int) -> tuple[Tensor, Tensor]:
        x, x_pos, _, _ = world.sample_pairs(config.batch_size, generator=step_generator(config.seed, step))
        return x, x_pos

    def loss_fn(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        x, x_pos = batch
        return info_nce(model(x), model(x_pos), temperature=config.temperature, gather=True)

    torch.manual_seed(config.seed)
    encoder = MLP(world.input_dim, config.hidden, config.embed_dim)
    random_encoder = MLP(world.input_dim, config.hidden, config.embed_dim)
    random_encoder.load_state_dict(encoder.state_dict())

    train_cfg = TrainConfig(steps=config.steps, seed=config.seed, log_every=25, optim=OptimConfig(lr=config.lr))
    result = fit(encoder, loss_fn, batch_at, train_cfg, out_dir=out_dir)

    # Held-out pairs: a named stream the training never draws from.
    x, x_pos, z, _ = world.sample_pairs(config.eval_size, generator=stream_generator(config.seed, "eval"))
    rows = {
        "random encoder": evaluate(random_encoder.eval(), x, x_pos, z, config.temperature),
        "trained encoder": evaluate(encoder, x, x_pos, z, config.temperature),
        "ground truth g⁻¹": evaluate(world.ground_truth_encoder(), x, x_pos, z, config.temperature),
    }
    table = {
        "title": "Held-out audit (lower loss/alignment/uniformity is better; higher retrieval and R²)",
        "columns": ["metric", *rows],
        "rows": [[m, *(round(rows[k][m], 4) for k in rows)] for m in rows["trained encoder"]],
    }
    _plot_curve(result.history, out_dir / "demo_training.png")
    curves = k_gap_figure(
        encoder,
        world,
        out_dir / "k_gap.png",
        temperature=config.temperature,
        n_groups=config.k_gap_groups,
        label="trained MLP",
    )
    t, gt = rows["trained encoder"], rows["ground truth g⁻¹"]
    slope = curves["trained MLP"]["slopes"]["pop_minus_risk"]["slope"]
    return {
        "summary": (
            f"An MLP encoder trained for {config.steps} steps with InfoNCE (τ = {config.temperature}) on the "
            f"sphere world (d = {config.latent_dim}, κ = {config.kappa}, mixing '{config.mixing}') reaches a "
            f"held-out loss of {t['infonce_loss']:.3f} (ground truth g⁻¹: {gt['infonce_loss']:.3f}), top-1 "
            f"retrieval {t['top1_retrieval']:.3f} among {config.eval_size} candidates (g⁻¹: "
            f"{gt['top1_retrieval']:.3f}), and recovers the latents with linear R² = {t['linear_r2']:.3f} "
            f"(random encoder: {rows['random encoder']['linear_r2']:.3f})."
        ),
        "metrics": {f"trained/{k}": v for k, v in t.items()}
        | {"train_seconds": result.seconds}
        | ({"k_gap_slope": float(slope)} if isinstance(slope, (int, float)) else {}),
        "tables": [table],
        "figures": [
            {
                "file": "demo_training.png",
                "caption": "Training loss of the demo encoder (InfoNCE, in-batch negatives).",
            },
            {
                "file": "k_gap.png",
                "caption": "Whiteley's k-gap for the trained encoder and for g⁻¹: |population CE − R(φ; k, τ)| and "
                "the empirical-search gap against k, with the Prop. 1/2 bounds.",
            },
        ],
    }


def _run_paper(name: str, out: str) -> str:
    """Worker: run one experiment's quick setting with one torch thread; returns its summary."""
    from contrastlab.experiments import run_experiment

    torch.set_num_threads(1)
    return str(run_experiment(name, None, out, quick=True).get("summary", ""))


class PaperRow(NamedTuple):
    """One paper experiment run by the demo with its ``--quick`` settings."""

    experiment: str
    seconds: float
    status: str
    """``ok``, or ``failed:`` followed by the error"""
    summary: str


OWN_PROGRESS = True
"""The demo shows its own progress board (the audit and every paper experiment); ``contrastlab run`` adds none."""


def _audit_config(config: Config) -> dict[str, Any]:
    """The fields that decide part 1 (the audit), as recorded in ``audit/results.json``."""
    from contrastlab.config import to_dict

    return {k: v for k, v in to_dict(config).items() if k not in ("papers", "workers")}


def run(config: Config, out_dir: Path) -> dict:
    """Audit (part 1), then the papers' quick experiments (part 2), then one report over all of them.

    Progress goes to stderr on a :class:`~contrastlab.progress.Board`: which parts run, their elapsed time
    and an estimate from their recorded durations (a previous demo in the same folder, else the
    reference machine's); live in a terminal, plain lines otherwise. Ctrl-C stops the running
    experiments, prints what finished and raises ``KeyboardInterrupt``.
    """
    from rich.console import Console

    from contrastlab.config import to_dict
    from contrastlab.experiments._durations import recorded_seconds
    from contrastlab.experiments._parallel import Job, run_in_workers
    from contrastlab.progress import Board, Task
    from contrastlab.report import write_report

    main_dir = out_dir / "audit"
    audit_cfg = _audit_config(config)
    tasks = [Task("audit", *recorded_seconds("demo audit", audit_cfg, main_dir, quick=False))]
    for name in config.papers:
        from contrastlab.experiments import resolve_config

        quick_cfg = to_dict(resolve_config(name, quick=True))
        tasks.append(Task(name, *recorded_seconds(name, quick_cfg, out_dir / name, quick=True, reference=True)))
    board = Board("demo", tasks, workers=max(1, config.workers))
    outcomes: dict[str, Any] = {}
    interrupted = False
    with board:
        console = Console()  # created inside the board: in a terminal, its lines print above the board
        t0 = time.perf_counter()
        board.start("audit")
        try:
            part1 = audit(config, main_dir)
        except KeyboardInterrupt:
            board.end("audit", "stopped", "interrupted")
            interrupted = True
        else:
            write_json_atomic(
                main_dir / "results.json",
                {"name": "demo audit", **part1, "config": audit_cfg, "runtime_s": time.perf_counter() - t0},
            )
            board.end("audit", "done")
            _print_table(console, part1["tables"][0])
            console.print(part1["summary"])
            if config.papers:
                jobs = [
                    Job(name, _run_paper, (name, str(out_dir / name)), out_dir / name / "output.log")
                    for name in config.papers
                ]
                outcomes, interrupted = run_in_workers(jobs, board, max(1, config.workers))
    if interrupted:
        import sys

        print("demo interrupted; " + "; ".join(board.summary()), file=sys.stderr)
        finished = [str(out_dir / n) for n in board.names("done") if n != "audit"]
        if "audit" in board.names("done"):
            finished.insert(0, str(main_dir))
        if finished:
            print(f"a report over what finished: contrastlab report {' '.join(finished)}", file=sys.stderr)
        raise KeyboardInterrupt

    paper_rows: list[PaperRow] = []
    done_dirs: list[Path] = []
    for name in config.papers:
        o = outcomes[name]
        status = "ok" if o.state == "done" else f"failed: {o.error} (log: {out_dir / name / 'output.log'})"
        paper_rows.append(PaperRow(name, round(o.seconds, 1), status, str(o.result or "")))
        if o.state == "done":
            done_dirs.append(out_dir / name)
    if paper_rows:
        _print_table(
            console,
            {
                "title": f"Paper experiments (--quick, {config.workers} at a time)",
                "columns": ["experiment", "seconds", "status"],
                "rows": [[r.experiment, f"{r.seconds:.1f}", r.status] for r in paper_rows],
            },
        )
    md, html = write_report([main_dir, *done_dirs], out_dir / "report")
    console.print(f"\nReport: {html}")
    return {
        "summary": part1["summary"]
        + (
            f" {len(done_dirs)} of {len(config.papers)} paper experiments ran; see report/report.html."
            if config.papers
            else ""
        ),
        "metrics": part1["metrics"],
        "tables": [
            part1["tables"][0],
            *(
                [
                    {
                        "title": "Paper experiments (quick settings)",
                        "columns": list(PaperRow._fields),
                        "rows": paper_rows,
                    }
                ]
                if paper_rows
                else []
            ),
        ],
        "figures": [{"file": f"audit/{f['file']}", "caption": f["caption"]} for f in part1["figures"]],
        "report": {"markdown": str(md.relative_to(out_dir)), "html": str(html.relative_to(out_dir))},
    }


def _print_table(console: Any, table: dict) -> None:
    from rich.table import Table

    t = Table(title=table["title"])
    for c in table["columns"]:
        t.add_column(str(c))
    for r in table["rows"]:
        t.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r))
    console.print(t)


def _plot_curve(history: list[dict], path: Path) -> None:
    steps = [h["step"] for h in history if "loss" in h]
    loss = [h["loss"] for h in history if "loss" in h]
    fig, ax = figures.subplots(figsize=(5, 3.2))
    ax.plot(steps, loss)
    ax.set_xlabel("step")
    ax.set_ylabel("InfoNCE loss")
    ax.set_title("demo: training loss")
    fig.tight_layout()
    figures.save_png(fig, path, dpi=110)
