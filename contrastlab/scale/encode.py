"""Encoding a corpus into an embedding store, in one process or on Ray; an interrupted encode resumes.

:func:`encode_corpus` scans the corpus (:class:`~contrastlab.scale.corpus.TextCorpus`), loads the model
once to record its identity and dimension, opens a :class:`~contrastlab.search.store.StoreWriter` (which
keeps the shards an interrupted run finished and verified) and encodes the shards still missing:

- ``local``: shard by shard in this process; the texts of a shard are encoded in batches of
  ``batch_size``, sorted by length (less padding), and the shard is written.
- ``ray``: a Ray Data pipeline over the missing shards cut into tasks of at most ``task_rows`` rows (a
  task never crosses a shard boundary). A fixed pool of ``actors`` actors (:class:`EncodeActor`,
  ``ActorPoolStrategy(size=actors)``), each of which loads the model once and checks its fingerprint
  against the driver's, takes one task at a time: it reads the task's texts from the corpus, encodes them
  in batches of ``batch_size`` and returns ``{"id", "emb"}``. Ray Data does not keep the rows' order, so
  each row carries its id; the driver gathers the rows of each shard (shard ``id // shard_rows``) and
  writes the shard as soon as all its rows are in, exactly the shards the one-process path writes.

  Why the tasks are ranges read inside the actor, each one row of the pipeline (``batch_size=1``): Ray
  Data bundles small input blocks until a bundle holds a ``map_batches`` batch of rows, so a pipeline of
  one-row "shard index" items with a batch of 64 texts hands every shard to *one* actor task, and one
  actor encodes the whole corpus while the others idle. Tasks of a few batches also balance the actors
  when one starts later than another (its model load) and keep the driver's first rows early.

Before the model loads, a Ray engine is checked (:func:`~contrastlab.scale.cluster.check_engine`: Ray
installed, ``--address`` answering), and Ray temp folders an earlier, killed run left in the store folder
are removed (:func:`~contrastlab.scale.cluster.remove_stale_temp_dirs`): a finished store holds only its
manifest and shards. A call that fails before any shard exists (this run's or an earlier one's) leaves no
unfinished store behind: its journal, and the folder if the call created it and it is empty, are removed.

The two engines write the same store: the same shard names, row counts, id ranges, ids, model identity
and corpus identity. The embeddings are equal to float32 rounding, not bitwise: a Ray batch mixes texts
differently from a one-process batch, so the padded length and the matrix shapes the kernels see differ,
and a float32 BERT's output moves by a few units in the last place (the tests allow ``1e-5`` of the
largest absolute value). Within one engine and one machine a re-run reproduces the same bits.

Memory: an actor holds the model, one task's ``task_rows`` texts and ``(task_rows, D)`` result, and the
activations of one batch of at most ``batch_size`` texts (each truncated to the model's ``max_seq_length``
tokens); Ray Data's streaming executor bounds the tasks in flight. The driver holds the rows of the
shards not yet complete (Ray hands out tasks in shard order, so usually one or two shards) and one copy of
the model (for the identity; it is released before the pipeline starts).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from contrastlab.scale.cluster import Engine, check_engine, ray_session, remove_stale_temp_dirs
from contrastlab.scale.corpus import TextCorpus
from contrastlab.search.store import JOURNAL, EmbeddingStore, ShardRecord, StoreWriter

__all__ = [
    "Encoder",
    "EncoderSource",
    "EncodeResult",
    "EncodeActor",
    "default_task_rows",
    "encode_batch",
    "encode_corpus",
    "task_ranges",
    "DEFAULT_SHARD_ROWS",
    "DEFAULT_BATCH_SIZE",
]

DEFAULT_SHARD_ROWS = 65_536
"""Rows per shard: 65,536 × 384 float32 dimensions is a 96 MiB shard (plus 0.5 MiB of ids)."""

DEFAULT_BATCH_SIZE = 64
"""Texts per forward pass (the audit's default)."""

TASK_BATCHES = 8
"""Batches per Ray task by default (``task_rows = min(shard_rows, 8 · batch_size)``): 512 texts of MiniLM are
a few seconds of one core, long beside Ray's per-task cost (milliseconds) and short enough to balance the
actors."""


class Encoder(Protocol):
    """A loaded text encoder: ``(n,)`` texts → ``(n, D)`` embeddings (a tensor or an array)."""

    def __call__(self, texts: list[str]) -> Any:
        """Embed ``texts``."""
        ...


class EncoderSource(Protocol):
    """A picklable recipe for an encoder: each Ray actor calls :meth:`load` once."""

    def load(self) -> Encoder:
        """Load the encoder."""
        ...

    def identity(self, encoder: Any) -> dict[str, Any]:
        """The loaded encoder's identity: at least ``name``, ``dim`` and ``fingerprint``."""
        ...


@dataclass(frozen=True)
class EncodeResult:
    """What :func:`encode_corpus` did.

    Attributes:
        store: the complete store.
        engine: ``"local"`` or ``"ray"``.
        written: indices of the shards encoded by this call.
        skipped: indices of the shards an earlier, interrupted call had finished (kept, verified).
        startup_s: seconds from the call until the first encoded rows came back (corpus scan, model
            load, Ray start-up and actor start, and the first batch).
        total_s: seconds of the whole call.
    """

    store: EmbeddingStore
    engine: str
    written: tuple[int, ...]
    skipped: tuple[int, ...]
    startup_s: float
    total_s: float
    timings: dict[str, float] = field(default_factory=dict)


def encode_batch(encoder: Encoder, texts: list[str], batch_size: int) -> np.ndarray:
    """Encode ``texts`` in batches of ``batch_size`` sorted by length; ``(len(texts), D)`` float32, input order.

    Raises:
        ValueError: the encoder's output is not one finite 2-D row per text.
    """
    import torch

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: np.ndarray | None = None
    with torch.inference_mode():
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            emb = encoder([texts[i] for i in idx])
            emb = emb.float().cpu().numpy() if isinstance(emb, torch.Tensor) else np.asarray(emb, dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] != len(idx):
                raise ValueError(f"model: gives output of shape {emb.shape} for {len(idx)} texts, not (N, D)")
            if out is None:
                out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
            out[idx] = emb
    if out is None:
        raise ValueError("texts: nothing to encode")
    return out


class EncodeActor:
    """The Ray actor of the encode: loads the model once, then reads and encodes one range of the corpus per call.

    Args:
        corpus: the scanned corpus (read at the same path on every node).
        source: the encoder's recipe.
        fingerprint: the driver's fingerprint of the model; a different model here is refused.
        batch_size: texts per forward pass.
        threads: torch intra-op threads of this actor.
    """

    def __init__(
        self, corpus: TextCorpus, source: EncoderSource, fingerprint: str, batch_size: int, threads: int
    ) -> None:
        import torch

        torch.set_num_threads(threads)
        self.corpus = corpus
        self.encoder = source.load()
        got = source.identity(self.encoder).get("fingerprint")
        if got != fingerprint:
            raise RuntimeError(f"model: the actor loaded a model with fingerprint {got}, the driver {fingerprint}")
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``{"start": (n,), "stop": (n,)}`` ranges → ``{"id": (rows,), "emb": (rows, D)}``, their documents."""
        ids: list[np.ndarray] = []
        texts: list[str] = []
        for start, stop in zip(batch["start"].tolist(), batch["stop"].tolist(), strict=True):
            ids.append(np.arange(start, stop, dtype=np.int64))
            texts.extend(self.corpus.read(start, stop))
        return {"id": np.concatenate(ids), "emb": encode_batch(self.encoder, texts, self.batch_size)}


def default_task_rows(shard_rows: int, batch_size: int) -> int:
    """Rows per Ray task when none is given: ``min(shard_rows, TASK_BATCHES · batch_size)``."""
    return min(shard_rows, TASK_BATCHES * batch_size)


def task_ranges(bounds: list[tuple[int, int]], task_rows: int) -> list[tuple[int, int]]:
    """The Ray tasks of an encode: each shard ``(start, stop)`` in ``bounds`` cut into ranges of ``task_rows``.

    >>> task_ranges([(0, 5), (5, 8)], 2)
    [(0, 2), (2, 4), (4, 5), (5, 7), (7, 8)]
    """
    _positive("task_rows", task_rows)
    return [(a, min(a + task_rows, stop)) for start, stop in bounds for a in range(start, stop, task_rows)]


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def encode_corpus(
    corpus: str | Path | TextCorpus,
    source: EncoderSource,
    out: str | Path,
    *,
    engine: Engine | None = None,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    actors: int = 2,
    actor_threads: int = 1,
    task_rows: int | None = None,
    threads: int | None = None,
    on_shard: Callable[[int, ShardRecord], None] | None = None,
) -> EncodeResult:
    """Encode the corpus at ``corpus`` into the embedding store ``out`` (see the module docstring).

    Args:
        corpus: a FILE (one document per line) or DIR (``*.txt``), see :mod:`contrastlab.scale.corpus`; or
            one already scanned (its ``stride`` only sets how far a read may skip; ``task_rows`` reads best).
        source: the encoder's recipe (e.g. :class:`contrastlab.audit.text_model.TextModelSource`).
        out: the store folder: new, empty, or an interrupted encode of the same corpus and model.
        engine: where to run (default: this process).
        shard_rows: rows per shard.
        batch_size: texts per forward pass (the Ray batch size too).
        actors: Ray actors (each loads the model once).
        actor_threads: torch threads (and Ray CPUs) per actor.
        task_rows: rows per Ray task (default ``min(shard_rows, TASK_BATCHES · batch_size)``).
        threads: torch threads of the one-process encode (default: torch's current setting).
        on_shard: called after each shard is written, with its index and record.

    Raises:
        ValueError: a bad argument or corpus (the message names the file and line), a model that
            cannot be loaded (names ``model``), ``out`` holding another store (a ``StoreError``), or an
            unusable engine (an ``EngineError`` naming ``--address`` or ``engine``).
    """
    t0 = time.perf_counter()
    engine = engine or Engine()
    for name, value in (("shard_rows", shard_rows), ("batch_size", batch_size), ("actors", actors)):
        _positive(name, value)
    _positive("actor_threads", actor_threads)
    task_rows = default_task_rows(shard_rows, batch_size) if task_rows is None else task_rows
    _positive("task_rows", task_rows)
    text_corpus = corpus if isinstance(corpus, TextCorpus) else TextCorpus.scan(corpus, stride=task_rows)
    check_engine(engine)  # an unreachable --address fails here, not after the model has loaded
    remove_stale_temp_dirs(out)
    encoder = source.load()
    identity = source.identity(encoder)
    created = not Path(out).exists()
    writer = StoreWriter(
        out,
        count=text_corpus.count,
        dim=int(identity["dim"]),
        dtype="float32",
        shard_rows=shard_rows,
        model=identity,
        meta={"corpus": text_corpus.identity()},
    )
    local = None if engine.is_ray else encoder
    del encoder  # on Ray the actors load their own copies: the driver's is released before the pipeline starts
    try:
        return _encode_pending(
            text_corpus, source, writer, local, identity, engine, batch_size, actors, actor_threads, task_rows,
            threads, on_shard, t0,
        )  # fmt: skip
    except BaseException:
        if not writer.records:  # no shard exists: nothing to resume, so no unfinished store is left
            (writer.path / JOURNAL).unlink(missing_ok=True)
            if created:
                with contextlib.suppress(OSError):  # kept when not empty (an embedded Ray's logs)
                    writer.path.rmdir()
        raise


def _encode_pending(
    text_corpus: TextCorpus,
    source: EncoderSource,
    writer: StoreWriter,
    encoder: Encoder | None,
    identity: dict[str, Any],
    engine: Engine,
    batch_size: int,
    actors: int,
    actor_threads: int,
    task_rows: int,
    threads: int | None,
    on_shard: Callable[[int, ShardRecord], None] | None,
    t0: float,
) -> EncodeResult:
    """Encode the shards ``writer`` still misses (in this process with ``encoder``, or on Ray) and finish the store."""
    pending = writer.pending()
    timings: dict[str, float] = {"prepare_s": time.perf_counter() - t0}
    first: list[float] = []

    def written(i: int, rec: ShardRecord) -> None:
        if on_shard is not None:
            on_shard(i, rec)

    def rows_in() -> None:
        if not first:
            first.append(time.perf_counter() - t0)

    if pending and engine.is_ray:
        _encode_on_ray(
            text_corpus,
            source,
            writer,
            pending,
            engine,
            identity,
            batch_size,
            actors,
            actor_threads,
            task_rows,
            written,
            rows_in,
            timings,
        )
    elif pending:
        assert encoder is not None, "a local encode needs the loaded encoder"
        with _torch_threads(threads):
            for i in pending:
                start, stop = writer.bounds[i]
                emb = encode_batch(encoder, text_corpus.read(start, stop), batch_size)
                rows_in()
                written(i, writer.write_shard(i, np.arange(start, stop), emb))
    store = writer.finish()
    total = time.perf_counter() - t0
    return EncodeResult(
        store=store,
        engine=engine.name,
        written=tuple(pending),
        skipped=tuple(sorted(writer.done)),
        startup_s=first[0] if first else total,
        total_s=total,
        timings=timings,
    )


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    import torch

    if threads is None:
        yield
        return
    _positive("threads", threads)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _encode_on_ray(
    corpus: TextCorpus,
    source: EncoderSource,
    writer: StoreWriter,
    pending: list[int],
    engine: Engine,
    identity: dict[str, Any],
    batch_size: int,
    actors: int,
    actor_threads: int,
    task_rows: int,
    written: Callable[[int, ShardRecord], None],
    rows_in: Callable[[], None],
    timings: dict[str, float],
) -> None:
    """Run the Ray Data pipeline over the ``pending`` shards and write each shard as its rows arrive."""
    t0 = time.perf_counter()
    with ray_session(engine.address, temp_dir=writer.path, num_cpus=actors * actor_threads + 1):
        timings["session_s"] = time.perf_counter() - t0
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        shard_rows = writer.plan["shard_rows"]
        need = {i: writer.bounds[i][1] - writer.bounds[i][0] for i in pending}
        parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {i: [] for i in pending}
        have = dict.fromkeys(pending, 0)
        tasks = task_ranges([writer.bounds[i] for i in pending], task_rows)
        ds = ray.data.from_items(
            [{"start": a, "stop": b} for a, b in tasks], override_num_blocks=len(tasks)
        ).map_batches(
            EncodeActor,
            fn_constructor_args=(corpus, source, identity["fingerprint"], batch_size, actor_threads),
            batch_size=1,  # one task per call: see the module docstring
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=actor_threads,
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            rows_in()
            ids = np.asarray(batch["id"], dtype=np.int64)
            emb = np.asarray(batch["emb"], dtype=np.float32)
            shard_of = ids // shard_rows
            for i in np.unique(shard_of).tolist():
                sel = shard_of == i
                if i not in parts:
                    raise RuntimeError(f"Ray returned rows of shard {i}, which was not asked for (or twice)")
                parts[i].append((ids[sel], emb[sel]))
                have[i] += int(sel.sum())
                if have[i] == need[i]:
                    got = parts.pop(i)
                    written(
                        i,
                        writer.write_shard(i, np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])),
                    )
                elif have[i] > need[i]:
                    raise RuntimeError(f"Ray returned {have[i]} rows for shard {i} of {need[i]} rows")
        if parts:
            raise RuntimeError(f"Ray returned no or too few rows for shards {sorted(parts)[:10]}")
