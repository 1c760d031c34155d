"""``contrastlab encode``: one process and Ray write the same store; an interrupted encode resumes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
    return encode_corpus(corpus, TextModelSource(str(model)), out, shard_rows=SHARD_ROWS, batch_size=BATCH).store


class _Stop(Exception):
    pass


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


def test_interrupted_local_encode_resumes_with_the_same_bits(inputs, local_store, tmp_path: Path):
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    source, out = TextModelSource(str(model)), tmp_path / "store"
    on_shard, done = _stop_after(2)
    with pytest.raises(_Stop):
        encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH, on_shard=on_shard)
    assert done == [0, 1] and (out / JOURNAL).is_file() and not (out / MANIFEST).exists()
    with pytest.raises(StoreError, match="unfinished store"):
        EmbeddingStore.open(out)
    again = encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH)
    assert (again.skipped, again.written) == ((0, 1), (2, 3))
    assert again.store.shards == local_store.shards  # same process, same batches: the same bits
    assert encode_corpus(corpus, source, out, shard_rows=SHARD_ROWS, batch_size=BATCH).written == ()


def test_another_model_into_the_same_store_is_refused(inputs, local_store, tmp_path: Path):
    from contrastlab.audit.text_model import TextModelSource

    model, corpus = inputs
    other = write_tiny_bert(tmp_path / "other", "st", seed=1)
    with pytest.raises(StoreError, match=r"holds a store of another plan \(model "):
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
