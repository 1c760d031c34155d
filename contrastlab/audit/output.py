"""What every audit shares beyond its own measurements: the corpus as a searchable index, and the run folder.

* :func:`open_corpus` — the index stage, the engine's seam: documents as a cosine
  :class:`~contrastlab.search.sharded.ShardedSearch`, held in this process or in Ray actors;
* :func:`write_run_folder` — the report stage's writing: figures, ``results.json``, the report and extra JSON
  files, staged beside the folder and moved in, ``results.json`` last;
* :func:`compression_sentence`, :func:`plot_claims` — the summary's sentence on the compression audit and the
  norm claims' figure, the same on pairs and on tasks.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import Tensor

from contrastlab._checks import check_int
from contrastlab.audit.compress import CompressionResult
from contrastlab.audit.norm_audit import NormClaims
from contrastlab.search.sharded import ShardedSearch, split_rows

__all__ = ["open_corpus", "write_run_folder", "compression_sentence", "plot_claims", "risk_table"]


@contextmanager
def open_corpus(
    documents: Tensor, *, shards: int | None = None, ray: ModuleType | None = None
) -> Iterator[ShardedSearch]:
    """Index stage, the engine's seam: the documents as a cosine :class:`ShardedSearch` whose ids are positions.

    The documents are held in float64 (their float32 values exactly, for the index; normalised in float64
    for the softmax search), split into ``shards`` contiguous runs of rows.

    Args:
        documents: ``(M, D)`` document embeddings.
        shards: number of shards (default: 1 in this process, one per alive node on Ray).
        ray: a connected ``ray`` module (:func:`contrastlab.scale.cluster.ray_session`): one actor per shard;
            ``None``: the shards are held in this process.

    Yields:
        The corpus; Ray actors are ended when the block ends.
    """
    if shards is not None:
        check_int("shards", shards, 1)
    docs64 = documents.detach().cpu().double().numpy()
    if ray is None:
        corpus = ShardedSearch.local(split_rows(docs64, shards or 1), metric="cosine")
    else:
        from contrastlab.scale.sharded_search import ray_rows_search

        corpus = ray_rows_search(docs64, shards=shards, metric="cosine", ray=ray)
    try:
        yield corpus
    finally:
        corpus.close()


def write_run_folder(
    results: dict[str, Any],
    out: Path,
    draw: Any,
    *,
    t0: float,
    t_report: float,
    extra: dict[str, Any] | None = None,
    layout: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write an audit's folder atomically: figures, ``results.json``, the report, and ``extra`` JSON files.

    Everything is staged in a temporary folder beside ``out`` and moved in, ``results.json`` last (its
    presence marks a complete audit), so a failure leaves nothing that looks complete.

    Args:
        results: the results dictionary (its ``timing.stages`` gets ``report_s``, it gets ``runtime_s``).
        out: the output folder.
        draw: ``draw(stage) -> figures``: writes the figures into ``stage`` and returns their entries.
        t0: ``time.perf_counter()`` at the audit's start.
        t_report: ``time.perf_counter()`` at the report stage's start.
        extra: file name → JSON object written beside ``results.json``.
        layout: ``layout(results) -> layout``, called once the figures are drawn: the report's order
            (:mod:`contrastlab.audit.report_section`), stored as ``results["layout"]``.

    Returns:
        ``results`` as JSON values, with ``out_dir``.
    """
    from contrastlab.io import to_jsonable, write_json_atomic
    from contrastlab.report import write_report

    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        results["figures"] = draw(stage)
        if layout is not None:
            results["layout"] = layout(results)
        results["timing"]["stages"]["report_s"] = time.perf_counter() - t_report  # up to the files' writing
        results["runtime_s"] = time.perf_counter() - t0
        for name, obj in (extra or {}).items():
            write_json_atomic(stage / name, obj)
        write_json_atomic(stage / "results.json", results)
        write_report([stage], stage, shown_as=[out])  # the report names the folder it is moved into
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(stage.iterdir()):
            if f.name != "results.json":
                f.replace(out / f.name)
        (stage / "results.json").replace(out / "results.json")  # last: its presence marks a complete audit
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    final = to_jsonable(results)
    final["out_dir"] = str(out)
    return final


def compression_sentence(result: CompressionResult) -> str:
    """The summary's sentence on the compression audit: the fewest bytes per vector that keep R@1.

    A setting keeps R@1 when the 95% interval of its paired difference from the full model reaches 0.
    """
    full = result.rows[0]
    kept = [r for r in result.rows if r is full or r.paired["recall@1"].high >= 0]
    best = min(kept, key=lambda r: (r.bytes_per_vector, -r.metrics["recall@1"].mean))
    smallest = min(result.rows, key=lambda r: (r.bytes_per_vector, -r.metrics["recall@1"].mean))
    skipped = f" Not audited: {'; '.join(result.skipped)}." if result.skipped else ""
    return (
        f"Compression at τ*: {len(result.rows)} width × storage settings from {full.bytes_per_vector:g} down to "
        f"{smallest.bytes_per_vector:g} bytes per vector; the fewest bytes whose R@1 is not significantly below the "
        f"full model's ({full.metrics['recall@1'].mean:.3f}; paired 95% interval) is {best.width}-d {best.storage} "
        f"at {best.bytes_per_vector:g} bytes{f' ({best.note})' if best.note else ''} "
        f"(R@1 = {best.metrics['recall@1'].mean:.3f}, "
        f"Δ = {best.paired['recall@1'].mean:+.3f}); the smallest, {smallest.width}-d {smallest.storage}, has "
        f"R@1 = {smallest.metrics['recall@1'].mean:.3f}.{skipped}"
    )


def plot_claims(claims: NormClaims, path: Path, title: str) -> None:
    """The norm claims' figure: word norms against frequency, and the hypernym pairs' log-norm differences."""
    from contrastlab.audit.figures import plot_norm_claims

    estimates = {name: claims.claims[name].estimate.value for name in ("frequency", "specificity")}
    plot_norm_claims(claims.word_data, claims.pair_data, estimates, path, title=title)


def risk_table(risk: dict[str, Any], title: str) -> dict[str, Any]:
    """The report's table of a risk curve (:func:`contrastlab.audit.diagnostics.risk_curve`): k, risk, gap, s.e."""
    rows = zip(
        risk["ks"], risk["risk"]["mean"], risk["risk"]["se"], risk["gap"]["mean"], risk["gap"]["se"], strict=True
    )
    return {"title": title, "columns": ["k", "risk", "risk s.e.", "gap", "gap s.e."], "rows": [list(r) for r in rows]}
