"""One epoch of duplicate-free batches: contrastlab's ConflictFreeSampler against sentence-transformers' NO_DUPLICATES.

The data: ``--pairs`` (anchor, positive) text pairs of which ``--dup-fraction`` repeat the positive of an
earlier pair (so its text is a duplicate), every anchor distinct. Both samplers are asked for every batch
of one epoch (batch ``--batch``, drop_last), from a fresh sampler each time (the first epoch includes the
samplers' set-up). contrastlab's sampler gets each pair's texts as keys (the texts themselves here; a run
uses token-id tuples), sentence-transformers' ``NoDuplicatesBatchSampler`` (the sampler behind
``batch_sampler=BatchSamplers.NO_DUPLICATES``) gets the ``datasets.Dataset`` of the two columns. Both
results are checked: no batch holds a text twice. Runs alternate and the median over ``--repeats`` is
reported, with the ratio sentence-transformers / contrastlab.

    python benchmarks/conflict_free_sampler.py                       # 10^5 pairs, 10% duplicates, batch 32
    python benchmarks/conflict_free_sampler.py --pairs 2000 --repeats 1   # a quick check
"""

from __future__ import annotations

import argparse
import random

from _common import interleaved_medians, machine, median, paired_ratio, set_threads  # type: ignore[import-not-found]

from contrastlab.data.text.conflict_free import ConflictFreeSampler


def make_pairs(n: int, dup_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """``n`` pairs ``(anchor_i, positive)``: a ``dup_fraction`` of the positives repeat an earlier one."""
    rng = random.Random(seed)
    anchors = [f"query {i}" for i in range(n)]
    positives: list[str] = []
    for i in range(n):
        positives.append(rng.choice(positives) if positives and rng.random() < dup_fraction else f"document {i}")
    return anchors, positives


def check(batches: list[list[int]], anchors: list[str], positives: list[str]) -> int:
    """Rows placed; raises if a batch holds a text twice."""
    for b in batches:
        texts = [anchors[i] for i in b] + [positives[i] for i in b]
        if len(set(texts)) != len(texts):
            raise AssertionError("a batch holds a duplicate text")
    return sum(len(b) for b in batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--dup-fraction", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="cpu: this process's CPU time (a loaded machine)"
    )
    args = ap.parse_args()
    set_threads(args.threads)
    import datasets
    from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

    anchors, positives = make_pairs(args.pairs, args.dup_fraction, seed=0)
    dataset = datasets.Dataset.from_dict({"anchor": anchors, "positive": positives})
    keys = list(zip(anchors, positives, strict=True))
    out: dict[str, list[list[int]]] = {}

    def ours() -> None:
        s = ConflictFreeSampler(keys, args.batch, seed=0, drop_last=True)
        out["contrastlab"] = [s.indices_at(k).tolist() for k in range(s.batches_in_epoch(0))]

    def theirs() -> None:
        s = NoDuplicatesBatchSampler(dataset, args.batch, drop_last=True, seed=0)
        out["sentence-transformers"] = [list(b) for b in s]

    times = interleaved_medians(
        {"contrastlab": ours, "sentence-transformers": theirs}, args.repeats, warmup=0, clock=args.clock
    )
    print(f"# {machine()}")
    print(
        f"# {args.pairs} pairs, {args.dup_fraction:.0%} duplicate positives, batch {args.batch}, one epoch, "
        f"{args.clock} clock"
    )
    print("| sampler | epoch (s) | per batch (µs) | rows placed |")
    print("|---|---:|---:|---:|")
    for name, t in times.items():
        placed = check(out[name], anchors, positives)
        print(f"| {name} | {median(t):.3f} | {1e6 * median(t) / max(len(out[name]), 1):.1f} | {placed} |")
    print(
        f"ratio sentence-transformers / contrastlab: {paired_ratio(times, 'sentence-transformers', 'contrastlab'):.2f}x"
    )


if __name__ == "__main__":
    main()
