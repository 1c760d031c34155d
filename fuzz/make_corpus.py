"""Write the seed corpus of each reader family: small valid files made with the project's own writers.

Usage::

    python fuzz/make_corpus.py            # every family, into fuzz/corpus/FAMILY/
    python fuzz/make_corpus.py index npy  # some families

Each seed is one fuzz input (a selector byte, then the content of one file of a valid folder; see
``fuzz/targets.py``). The corpus folders are working copies (git-ignored): the fuzzer adds the inputs
that reach new code to them.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fuzz.targets import FAMILIES, seed_inputs  # noqa: E402


def write_seeds(family: str, corpus: Path) -> int:
    """Write the seeds of ``family`` into ``corpus`` (file names are content hashes); return how many."""
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = seed_inputs(FAMILIES[family])
    for data in seeds:
        (corpus / f"seed-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)
    return len(seeds)


def main(argv: list[str] | None = None) -> int:
    """Write the seeds of the families named on the command line (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", choices=[[], *FAMILIES], default=[], help="default: all")
    parser.add_argument("--out", default=str(HERE / "corpus"), help="corpus root (default fuzz/corpus)")
    args = parser.parse_args(argv)
    for name in args.families or list(FAMILIES):
        n = write_seeds(name, Path(args.out) / name)
        print(f"{name}: {n} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
