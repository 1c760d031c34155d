"""``contrastlab encode``: one process and Ray write the same store; an interrupted encode resumes.

Every one-process encode whose shards are compared bit for bit runs with one torch thread (``threads=1``, or
:func:`_one_torch_thread` around the command): the same bits are promised for the same arithmetic, and the
thread count is part of it. The module's ``local_store`` is built before the per-test thread setting of
``tests/conftest.py`` applies (a module fixture comes first), so without the pin it would run at the
process's default count (the cores, or ``OMP_NUM_THREADS``) while the encodes it is compared with run at one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.scale.cluster import Engine
from contrastlab.scale.encode import encode_corpus
from contrastlab.search.store import JOURNAL, MANIFEST, EmbeddingStore, StoreError
from tests.models.text_models import write_tiny_bert

WORDS = "alpha beta gamma delta search engine corpus shard model ray data softmax partition".split()
ROWS, SHARD_ROWS, BATCH = 37, 10, 4  # 4 shards, the last one of 7 rows; batches cut across shards


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("encode")
    model = write_tiny_bert(root / "bert", "st")
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, int(rng.integers(1, 14)))) for _ in range(ROWS)]
    (root / "corpus.txt").write_text("\n".join(lines) + "\n")
    return model, root / "corpus.txt"


@pytest.fixture(scope="module")
def local_store(inputs, tmp_path_factory: pytest.TempPathFactory) -> EmbeddingStore:
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    out = tmp_path_factory.mktemp("local") / "store"
    return encode_corpus(
        corpus, TextModelSource(str(model)), out, shard_rows=SHARD_ROWS, batch_size=BATCH, threads=1
    ).store


class _Stop(Exception):
    pass


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _stop_after(n: int):
    done: list[int] = []

    def on_shard(i, rec):
        done.append(i)
        if len(done) == n:
            raise _Stop

    return on_shard, done


def test_local_store_holds_the_models_embeddings_of_every_line(inputs, local_store):
    from contrastlab.audit.inputs import encode_texts
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    source = TextModelSource(str(model))
    encoder = source.load()
    want = encode_texts(encoder, corpus.read_text().splitlines(), batch_size=8, progress=False, label="texts")
    ids, emb = local_store.read_all()
    assert np.array_equal(ids, np.arange(ROWS)) and emb.dtype == np.float32 and emb.shape == want.shape
    # other batches, other padding: float32 rounding of a 2-layer BERT (see contrastlab.scale.encode)
    np.testing.assert_allclose(emb, want.numpy(), rtol=0, atol=1e-5 * float(np.abs(emb).max()))
    assert local_store.model == source.identity(encoder)
    assert local_store.meta["corpus"]["documents"] == ROWS
    assert [s.rows for s in local_store.shards] == [10, 10, 10, 7]


def _encode_stopped_after_two_shards(inputs, out: Path):
    """A one-thread local encode of the module's corpus into ``out``, stopped after its second shard.

    Returns:
        The model source and the shards written, in order.
    """
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    source = TextModelSource(str(model))
    on_shard, done = _stop_after(2)
    with pytest.raises(_Stop):
        encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH, threads=1, on_shard=on_shard)
    return source, done


def test_interrupted_local_encode_resumes_with_the_same_bits(inputs, local_store, tmp_path: Path):
    _, corpus = inputs
    out = tmp_path / "store"
    source, done = _encode_stopped_after_two_shards(inputs, out)
    assert done == [0, 1] and (out / JOURNAL).is_file() and not (out / MANIFEST).exists()
    with pytest.raises(StoreError, match="unfinished store"):
        EmbeddingStore.open(out)
    again = encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH, threads=1)
    assert (again.skipped, again.written) == ((0, 1), (2, 3))
    assert again.store.shards == local_store.shards  # same process, same batches: the same bits
    assert encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH).written == ()


def test_another_model_into_the_same_store_is_refused(inputs, local_store, tmp_path: Path):
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    other = write_tiny_bert(tmp_path / "other", "st", seed=1)
    with pytest.raises(StoreError, match=r"holds a store of another plan \(model\.name"):
        encode_corpus(corpus, TextModelSource(str(other)), local_store.path, shard_rows=SHARD_ROWS)


def test_ray_resumes_an_interrupted_encode_and_equals_the_one_process_store(
    inputs, local_store, ray_cluster, tmp_path: Path
):
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    source, out = TextModelSource(str(model)), tmp_path / "store"
    on_shard, done = _stop_after(2)  # a one-process encode killed after two shards
    with pytest.raises(_Stop):
        encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH, on_shard=on_shard)
    engine = Engine("ray", ray_cluster.address)
    again = encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH, engine=engine, actors=2)
    assert (again.engine, again.skipped, again.written) == ("ray", (0, 1), (2, 3))
    store = again.store
    assert [(s.name, s.rows, s.id_min, s.id_max) for s in store.shards] == [
        (s.name, s.rows, s.id_min, s.id_max) for s in local_store.shards
    ]
    assert store.shards[:2] == local_store.shards[:2]  # kept as they were
    assert (store.model, store.meta, store.dim, store.dtype) == (
        local_store.model,
        local_store.meta,
        local_store.dim,
        local_store.dtype,
    )
    ids, emb = store.read_all()
    ref_ids, ref = local_store.read_all()
    assert np.array_equal(ids, ref_ids)
    # Ray's batches mix rows differently: equal to float32 rounding (see contrastlab.scale.encode)
    np.testing.assert_allclose(emb, ref, rtol=0, atol=1e-5 * float(np.abs(ref).max()))


def test_ray_encode_hands_work_to_every_actor_at_once(inputs, ray_cluster, tmp_path: Path):
    # Each actor's first call blocks until both actors have begun one: the encode completes only if Ray hands
    # tasks to both actors while the first is still busy (a pipeline that bundles every shard into one task
    # of one actor waits here until the barrier's timeout and fails).
    import ray

    from tests.scale import _barrier

    ray.cloudpickle.register_pickle_by_value(_barrier)  # the actors need not import the tests
    _, corpus = inputs
    (tmp_path / "barrier").mkdir()
    source = _barrier.BarrierSource(tmp_path / "barrier", actors=2)
    engine = Engine("ray", ray_cluster.address)
    result = encode_corpus(
        corpus, source, tmp_path / "store", shard_rows=SHARD_ROWS, batch_size=BATCH, engine=engine, actors=2
    )
    assert len(list((tmp_path / "barrier").iterdir())) == 2
    ids, emb = result.store.read_all()
    lines = corpus.read_text().splitlines()
    assert np.array_equal(ids, np.arange(ROWS))
    assert np.array_equal(emb[:, 0], [len(t) for t in lines])  # each row's own text, whatever actor it took


def test_task_ranges_cut_each_shard_and_never_cross_one():
    from contrastlab.scale.encode import default_task_rows, task_ranges

    assert task_ranges([(0, 10), (10, 20), (20, 27)], 4) == [
        (0, 4), (4, 8), (8, 10), (10, 14), (14, 18), (18, 20), (20, 24), (24, 27)
    ]  # fmt: skip
    assert task_ranges([(20, 27)], 100) == [(20, 27)]
    assert default_task_rows(65_536, 64) == 512 and default_task_rows(100, 64) == 100
    with pytest.raises(ValueError, match="task_rows"):
        task_ranges([(0, 3)], 0)


# ------------------------------------------------------------------------------------------- command line


def _one_line_exit_2(capsys, argv, match: str) -> None:
    from contrastlab.cli import main

    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "it/s]" not in line]  # transformers' bars
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(match, lines[0]), err


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", r"^encode: --corpus .*corpus\.txt: the file is empty"),
        (b"fine\nnul\x00\n", r"^encode: --corpus .*corpus\.txt, line 2: holds a NUL byte"),
        (b"fine\n\xfe\xff\n", r"^encode: --corpus .*corpus\.txt, line 2: bytes that are not UTF-8"),
    ],
)
def test_cli_bad_corpus_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path: Path, content: bytes, match: str):
    (tmp_path / "corpus.txt").write_bytes(content)
    argv = ["encode", "minilm", "--corpus", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "store")]
    _one_line_exit_2(capsys, argv, match)
    assert not (tmp_path / "store").exists()


def test_cli_bad_arguments_are_one_line_exit_2(capsys, inputs, tmp_path: Path):
    model, corpus = inputs
    base = ["encode", str(model), "--corpus", str(corpus), "--out", str(tmp_path / "store")]
    _one_line_exit_2(capsys, [*base, "--shard-rows", "0"], r"^encode: --shard-rows must be at least 1")
    _one_line_exit_2(capsys, [*base, "--address", "127.0.0.1:6379"], r"^encode: --address .* needs --engine ray")
    _one_line_exit_2(capsys, [*base, "--engine", "spark"], r"--engine: invalid choice")
    _one_line_exit_2(capsys, [*base[:1], str(tmp_path / "nope"), *base[2:]], r"^encode: model: folder .* does not")
    _one_line_exit_2(capsys, [*base[:3], str(tmp_path / "nope.txt"), *base[4:]], r"^encode: --corpus .*no such file")
    assert not (tmp_path / "store").exists()


def test_cli_engine_ray_without_ray_or_with_an_unreachable_address(capsys, monkeypatch, inputs, tmp_path: Path):
    model, corpus = inputs
    base = ["encode", str(model), "--corpus", str(corpus), "--out", str(tmp_path / "store"), "--engine", "ray"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if importlib.util.find_spec("ray") is not None:
        _one_line_exit_2(capsys, [*base, "--address", f"127.0.0.1:{port}"], rf"^encode: --address 127.0.0.1:{port}:")
        assert not (tmp_path / "store").exists()  # a run that never started leaves no unfinished store
    monkeypatch.setitem(sys.modules, "ray", None)
    _one_line_exit_2(capsys, base, r"^encode: engine: --engine ray needs .*pip install 'contrastlab\[ray\]'")
    assert not (tmp_path / "store").exists()


class _Unloadable:
    """A model recipe that must not be loaded (the engine is checked first)."""

    def load(self):
        raise AssertionError("the model was loaded before the engine was checked")

    def identity(self, encoder):
        raise AssertionError("the model was loaded before the engine was checked")


def test_an_unreachable_address_fails_before_the_model_loads(inputs, tmp_path: Path):
    pytest.importorskip("ray")
    from contrastlab.scale.cluster import EngineError

    _, corpus = inputs
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(EngineError, match=f"^--address {address}: no Ray cluster answers"):
        encode_corpus(corpus, _Unloadable(), tmp_path / "store", engine=Engine("ray", address))
    assert not (tmp_path / "store").exists()


class _Failing:
    """A 4-dimensional model whose every forward pass fails."""

    def load(self):
        def encode(texts):
            raise RuntimeError("the forward pass failed")

        return encode

    def identity(self, encoder):
        return {"name": "failing", "dim": 4, "fingerprint": "0"}


def test_a_run_that_writes_no_shard_leaves_no_unfinished_store(inputs, tmp_path: Path):
    _, corpus = inputs
    with pytest.raises(RuntimeError, match="the forward pass failed"):
        encode_corpus(corpus, _Failing(), tmp_path / "new", shard_rows=SHARD_ROWS, batch_size=BATCH)
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()  # a folder the user made stays, empty
    with pytest.raises(RuntimeError, match="the forward pass failed"):
        encode_corpus(corpus, _Failing(), tmp_path / "empty", shard_rows=SHARD_ROWS, batch_size=BATCH)
    assert list((tmp_path / "empty").iterdir()) == []


def _store_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_resumed_encode_removes_the_ray_temp_folders_an_earlier_run_left(inputs, local_store, tmp_path: Path):
    _, corpus = inputs
    out = tmp_path / "store"
    source, _ = _encode_stopped_after_two_shards(inputs, out)
    # what a killed embedded-Ray encode leaves in the store: its temp folder (token, a session with logs)
    left = out / "ray-k3x_9q2a"
    (left / "session_2026-12-06_03-00-00_000000_1" / "logs").mkdir(parents=True)
    (left / "session_2026-12-06_03-00-00_000000_1" / "logs" / "raylet.out").write_text("log\n")
    (left / "auth_token").write_text("0" * 64)
    again = encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH, threads=1)
    assert again.skipped == (0, 1) and again.store.shards == local_store.shards
    assert _store_files(out) == [MANIFEST, *(s.name for s in local_store.shards)]


_EMBEDDED_STOP = textwrap.dedent(
    """
    import os, sys
    from contrastlab.audit.text_model import TextModelSource
    from contrastlab.scale.cluster import Engine
    from contrastlab.scale.encode import encode_corpus

    def stop(i, rec):
        print(os.environ["RAY_TMPDIR"], flush=True)  # the session's temp dir, the marker of its processes
        raise SystemExit(3)

    model, corpus, out = sys.argv[1:]
    encode_corpus(corpus, TextModelSource(model), out, engine=Engine("ray"), shard_rows=10, batch_size=4,
                  actors=1, on_shard=stop)
    """
)


@pytest.mark.slow
def test_an_embedded_ray_encode_stopped_then_resumed_leaves_only_store_files(inputs, local_store, tmp_path: Path):
    """A real embedded Ray (127.0.0.1, usage reporting off) stopped after its first shard keeps its temp folder
    in the store for its logs; every Ray process has ended; the resumed run removes the folder."""
    pytest.importorskip("ray")
    from contrastlab.audit.text_model import TextModelSource
    from tests.scale._procs import wait_gone

    model, corpus = inputs
    out = Path("/tmp") / f"cl-{os.getpid()}"  # short: Ray's temp folder goes inside (see ray_temp_dir)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    try:
        run = subprocess.run(
            [sys.executable, "-c", _EMBEDDED_STOP, str(model), str(corpus), str(out)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert run.returncode == 3, run.stderr[-3000:]
        tmp = run.stdout.strip().splitlines()[-1]
        assert Path(tmp).parent == out and Path(tmp).is_dir()  # kept after the exception, for Ray's logs
        assert wait_gone(tmp) == []
        again = encode_corpus(corpus, TextModelSource(str(model)), out, shard_rows=SHARD_ROWS, batch_size=BATCH)
        assert len(again.skipped) == 1 and _store_files(out) == [MANIFEST, *(s.name for s in local_store.shards)]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_cli_encodes_and_refuses_another_model_into_the_store(capsys, inputs, local_store, tmp_path: Path):
    from contrastlab.cli import main

    model, corpus = inputs
    out = tmp_path / "store"
    argv = ["encode", str(model), "--corpus", str(corpus), "--out", str(out), "--shard-rows", "10", "--batch-size", "4"]
    with _one_torch_thread():  # the command encodes at torch's current setting
        assert main([*argv, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "37 documents, 4 shards of 16-dimensional float32 embeddings (4 encoded, 0 kept" in printed
    assert f"store: {out}" in printed
    assert EmbeddingStore.open(out).shards == local_store.shards
    other = write_tiny_bert(tmp_path / "other", "st", seed=1)
    _one_line_exit_2(
        capsys,
        ["encode", str(other), *argv[2:]],
        r"^encode: --out .* holds a store of another plan \(model\.name .*model\.fingerprint",
    )


@pytest.mark.slow
def test_cli_encode_killed_with_sigkill_resumes(inputs, tmp_path: Path):
    model, _ = inputs
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"document {i} " + " ".join(WORDS[: 1 + i % 13]) for i in range(400)) + "\n")
    out = tmp_path / "store"
    argv = [sys.executable, "-m", "contrastlab", "encode", str(model), "--corpus", str(corpus), "--out", str(out)]
    argv += ["--shard-rows", "2", "--batch-size", "2", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        journal = out / JOURNAL
        if journal.is_file() and journal.read_text().count("\n") >= 4:  # the plan and three shards
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert not (out / MANIFEST).exists(), "the encode finished before it was killed: make the corpus larger"
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    kept = int(re.search(r"\((\d+) encoded, (\d+) kept", run.stdout).group(2))
    assert kept >= 3
    from contrastlab.audit.text_model import TextModelSource

    ref = encode_corpus(corpus, TextModelSource(str(model)), tmp_path / "ref", shard_rows=2, batch_size=2, threads=1)
    assert EmbeddingStore.open(out, verify=True).shards == ref.store.shards  # one process each time: same bits


def test_cli_encode_truncates_at_the_models_own_max_seq_length_by_default(capsys, inputs, tmp_path: Path):
    """As the audit: no --max-seq-length, the store is encoded at the model's own length (the tiny BERT's 32)."""
    from sentence_transformers import SentenceTransformer

    from contrastlab.cli import main

    model, corpus = inputs
    own = SentenceTransformer(str(model), device="cpu").max_seq_length
    argv = ["encode", str(model), "--corpus", str(corpus), "--out", str(tmp_path / "store"), "--quiet"]
    assert main(argv) == 0
    assert EmbeddingStore.open(tmp_path / "store").model["max_seq_length"] == own == 32
    _one_line_exit_2(capsys, [*argv[:-1], "--max-seq-length", "-1"], r"^encode: --max-seq-length must be at least 0")
