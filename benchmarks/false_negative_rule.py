"""How much each false-negative rule keeps apart on a BEIR task's train split (counts, not timings).

For every pair of rows (one row per qrel) it counts the pairs that hold a false negative of an anchor
(:func:`contrastlab.data.text.conflict_free.false_negative_mask`), those that hold it one way only, and the pairs
the conflict-free sampler keeps apart (:func:`contrastlab.data.text.conflict_free.conflicts`), without negative
columns and with 3 random non-relevant documents per row; then the sampler's full batches per epoch at
batch 32 and 128, and in ``mask`` mode how many true negatives plain batches keep in a pair with a false
negative the other way. SciFact is CC BY-NC and is read from the shared folder; nothing is written.

    python benchmarks/false_negative_rule.py                 # SciFact's train split in the shared data folder
    python benchmarks/false_negative_rule.py --data DIR      # another BEIR-layout task with a train split
"""

from __future__ import annotations

import argparse
import itertools
import random
from pathlib import Path

from contrastlab.data.sampler import EpochSampler
from contrastlab.data.text.conflict_free import ConflictFreeSampler, conflicts, false_negative_mask
from contrastlab.data.text.pairs import TextPairs
from contrastlab.tasks import read_beir_task
from contrastlab.train.job.config import EncoderConfig, JobConfig
from contrastlab.train.job.text_dataset import row_keys

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact-train"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SCIFACT, help="a BEIR-layout task folder with a train split")
    args = parser.parse_args()
    task = read_beir_task(args.data, split="train")
    text = dict(zip(task.doc_ids, task.doc_texts, strict=True))
    rng, job = random.Random(0), JobConfig(encoder=EncoderConfig(name="minilm", max_seq_length=256))
    for k in (0, 3):  # k random non-relevant abstracts per row as negative columns
        rows = [
            (q, text[d], *(text[x] for x in rng.sample([x for x in task.doc_ids if x not in task.relevant(i)], k)))
            for i, q in zip(task.query_ids, task.query_texts, strict=True)
            for d in sorted(task.relevant(i))
        ]
        own, rel = row_keys(job, TextPairs(tuple(rows), ("anchor", "positive", *[f"negative_{j}" for j in range(k)])))
        fn = false_negative_mask([o[0] for o in own], [o[1] for o in own], rel).tolist()
        pairs = list(itertools.combinations(range(len(own)), 2))
        conflicting = sum(conflicts(own[i], rel[i], own[j], rel[j]) for i, j in pairs)
        with_fn = sum(fn[i][j] or fn[j][i] for i, j in pairs)
        one_way = sum(fn[i][j] != fn[j][i] for i, j in pairs)
        print(
            f"k={k}: {len(own)} rows, conflicting pairs {conflicting}, with a false negative {with_fn}, one way only {one_way}"
        )
        for b in (32, 128):
            s = ConflictFreeSampler(own, b, protected=rel, seed=0)
            print(f"  sampler, batch {b}: full batches in epochs 0-9 {[s.batches_in_epoch(e) for e in range(10)]}")
            if (
                k == 0
            ):  # mask mode: true negatives (i, j) of plain batches whose rows have a false negative the other way
                plain, steps = EpochSampler(len(own), b, seed=0), 20 * (len(own) // b)
                kept = sum(
                    fn[j][i] and not fn[i][j]
                    for t in range(steps)
                    for i, j in itertools.permutations(plain(t).tolist(), 2)
                )
                print(f"  mask, batch {b}: {kept / 20:.1f} such true negatives per epoch (20 epochs)")


if __name__ == "__main__":
    main()
