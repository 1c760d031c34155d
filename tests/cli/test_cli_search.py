import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from contrastlab.cli.search import main
from contrastlab.io import read_json_verified
from contrastlab.search import EmbeddingIndex, evaluate_retrieval


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    mu = rng.standard_normal((5, 16))
    lab = rng.integers(0, 5, size=300)
    x = (mu[lab] + rng.standard_normal((300, 16))).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "lab.npy", lab)
    np.save(tmp_path / "q.npy", x[:20])
    np.save(tmp_path / "ql.npy", lab[:20])
    save_file({"embeddings": x, "labels": lab.astype(np.int64)}, str(tmp_path / "x.safetensors"))
    return tmp_path, x, lab


def test_build_query_evaluate_round_trip(files, capsys):
    d, x, lab = files
    assert (
        main(
            [
                "build",
                "--embeddings",
                str(d / "x.npy"),
                "--labels",
                str(d / "lab.npy"),
                "--out",
                str(d / "idx"),
            ]
        )
        == 0
    )
    index = EmbeddingIndex.load(d / "idx")
    direct = index.search(x[:20], 7, exclude_ids=np.arange(20))

    query = ["query", "--index", str(d / "idx"), "--queries", str(d / "q.npy"), "-k", "7", "--exclude-self"]
    for out in ("r.npy", "r.json"):
        assert main([*query, "--out", str(d / out)]) == 0
    np.testing.assert_array_equal(np.load(d / "r.npy"), direct.ids)
    got = json.loads((d / "r.json").read_text())
    np.testing.assert_array_equal(np.array(got["ids"]), direct.ids)
    np.testing.assert_allclose(np.array(got["scores"]), direct.scores, rtol=1e-6)
    assert main(["query", "--index", str(d / "idx"), "--queries", str(d / "q.npy"), "-k", "3"]) == 0
    assert "top-3 ids" in capsys.readouterr().out

    assert (
        main(
            [
                "evaluate",
                "--index",
                str(d / "idx"),
                "--queries",
                str(d / "q.npy"),
                "--query-labels",
                str(d / "ql.npy"),
                "-k",
                "1,5",
                "--exclude-self",
                "--json",
                str(d / "m.json"),
            ]
        )
        == 0
    )
    shown = capsys.readouterr().out
    assert "map@r" in shown and "recall@5" in shown
    metrics = read_json_verified(d / "m.json")
    ref = evaluate_retrieval(index, x[:20], lab[:20], ks=(1, 5), query_ids=np.arange(20))
    assert metrics == pytest.approx(ref)


def test_build_from_safetensors_with_keys_and_hnsw(files):
    d, x, lab = files
    st = str(d / "x.safetensors")
    argv = [
        "build",
        "--embeddings",
        st,
        "--key",
        "embeddings",
        "--labels",
        st,
        "--labels-key",
        "labels",
        "--out",
        str(d / "h"),
        "--kind",
        "hnsw",
        "--metric",
        "ip",
    ]
    assert main(argv) == 0
    index = EmbeddingIndex.load(d / "h")
    assert (index.kind, index.metric, index.ntotal) == ("hnsw", "ip", 300)
    np.testing.assert_array_equal(index.labels, lab)
    assert (
        main(
            [
                "build",
                "--embeddings",
                str(d / "x.npy"),
                "--out",
                str(d / "ivf"),
                "--kind",
                "ivf",
                "--nlist",
                "4",
            ]
        )
        == 0
    )
    assert EmbeddingIndex.load(d / "ivf").nlist == 4


def test_errors_are_one_line_with_exit_codes(files, capsys):
    d, _, _ = files
    assert main(["build", "--embeddings", str(d / "missing.npy"), "--out", str(d / "i")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--embeddings: no such file" in err
    assert main(["build", "--embeddings", str(d / "x.safetensors"), "--out", str(d / "i")]) == 2
    assert "choose one with its --key option" in capsys.readouterr().err
    assert main(["build", "--embeddings", str(d / "x.npy"), "--labels", str(d / "ql.npy"), "--out", str(d / "i")]) == 2
    assert "--labels: expected shape (300,)" in capsys.readouterr().err
    assert main(["query", "--index", str(d / "nope"), "--queries", str(d / "q.npy")]) == 2
    assert "no meta.json" in capsys.readouterr().err
    assert main(["build", "--kind", "pq"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage error" in err
    assert main(["evaluate", "--index", "i", "--queries", "q", "--query-labels", "l", "-k", "1,x"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0


@pytest.mark.parametrize("shape", [(0, 20), (5, 0)])
def test_build_refuses_an_empty_embeddings_file(tmp_path, capsys, shape):
    np.save(tmp_path / "empty.npy", np.empty(shape, np.float32))
    for kind in ("flat", "ivf", "hnsw"):
        argv = ["build", "--embeddings", str(tmp_path / "empty.npy"), "--out", str(tmp_path / "idx"), "--kind", kind]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--embeddings: {tmp_path / 'empty.npy'} is empty (shape {shape})" in err
    assert not (tmp_path / "idx").exists()  # no index, not even its folder


def test_query_of_a_corrupted_index_exits_2_naming_the_file(files, capsys):
    d, _, _ = files
    assert main(["build", "--embeddings", str(d / "x.npy"), "--out", str(d / "idx"), "--no-progress"]) == 0
    ids = d / "idx" / "ids.npy"
    blob = bytearray(ids.read_bytes())
    blob[-3] ^= 0x01  # one id changes: the file still loads, so only its checksum can tell
    ids.write_bytes(bytes(blob))
    capsys.readouterr()
    assert main(["query", "--index", str(d / "idx"), "--queries", str(d / "q.npy"), "-k", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ids.npy is corrupted: its SHA-256 does not match meta.json" in err
