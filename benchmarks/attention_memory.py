"""The memory and time of one training step of MiniLM under SDPA and under contrastlab's training attention.

Each child process loads the bundled all-MiniLM-L6-v2 in training mode (dropout on) with one attention
implementation — ``sdpa`` (PyTorch's ``scaled_dot_product_attention``, which takes its math path under
dropout) or ``contrastlab_sdpa`` (:mod:`contrastlab.models.attention`: the same numbers, a 1-byte dropout
mask saved instead of two float copies of the attention) — and runs ``--steps`` forward + backward passes
of a batch of 32 queries and their 32 abstracts (SciFact's first 32 train pairs when ``--data`` holds the
task; else docstring-like filler text of 20 and 300 words), each column tokenised by itself at 256 tokens,
MultipleNegativesRankingLoss's cross-entropy at scale 20. It reports the rise of its peak resident set
over the step (``VmHWM`` after the steps minus before), its CPU time and the first step's loss, which must
be the same for both. The arms alternate, ``--runs`` times each.

    python benchmarks/attention_memory.py                 # 3 steps, 2 runs of each
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _common import ROOT, machine, peak_rss_bytes, run_child, scifact_train_pairs, set_threads

SCIFACT = ROOT.parent / "shared" / "data" / "scifact-train"
ARMS = ("sdpa", "contrastlab_sdpa")


def texts(data: Path) -> tuple[list[str], list[str]]:
    """32 queries and their abstracts (SciFact's first train pairs, or filler text)."""
    if data.is_dir():
        anchors, positives = scifact_train_pairs(data)
        return anchors[:32], positives[:32]
    import random

    words = "the of protein cell gene expression in human tissue was measured by".split()
    rng = random.Random(0)
    return [" ".join(rng.choices(words, k=20)) for _ in range(32)], [
        " ".join(rng.choices(words, k=300)) for _ in range(32)
    ]


def child(arm: str, args: argparse.Namespace) -> dict:
    """One process: load, switch the attention, time ``args.steps`` training steps."""
    import torch

    from contrastlab.models.attention import register
    from contrastlab.models.text import bundled_minilm_path, load_sentence_transformer

    model = load_sentence_transformer(bundled_minilm_path())
    model.max_seq_length = 256
    model[0].auto_model.set_attn_implementation(register() if arm == "contrastlab_sdpa" else arm)
    model.train()
    queries, passages = texts(args.data)
    features = [model[0].preprocess(queries), model[0].preprocess(passages)]
    before, start = peak_rss_bytes(), time.process_time()
    torch.manual_seed(0)
    first = None
    for _ in range(args.steps):
        a, b = (model(dict(f))["sentence_embedding"] for f in features)
        logits = 20 * torch.nn.functional.normalize(a) @ torch.nn.functional.normalize(b).T
        loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(queries)))
        loss.backward()
        model.zero_grad(set_to_none=True)
        first = float(loss) if first is None else first
    return {"rise": peak_rss_bytes() - before, "cpu": time.process_time() - start, "loss": first}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=SCIFACT)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    set_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    if args.steps < 1 or args.runs < 1:
        print("--steps and --runs must be >= 1", file=sys.stderr)
        return 2
    print(f"# {machine()}; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    common = ["--data", str(args.data), "--steps", str(args.steps), "--threads", str(args.threads)]
    rows: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for run in range(args.runs):
        for arm in ARMS if run % 2 == 0 else ARMS[::-1]:
            out = run_child([str(Path(__file__).resolve()), "--child", arm, *common])
            if "error" in out:
                print(f"{arm}: {out['error']}", file=sys.stderr)
                return 1
            rows[arm].append(out)
            print(
                f"{arm:<17} run {run}: peak rise {out['rise'] / 2**20:,.0f} MiB, CPU {out['cpu']:.1f} s, "
                f"first loss {out['loss']:.7f}"
            )
    print(f"# load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
