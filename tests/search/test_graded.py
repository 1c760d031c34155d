"""Graded metrics against trec_eval (pytrec_eval, a test oracle), closed forms and tie order."""

import math

import numpy as np
import pytest

from contrastlab.search.graded import (
    Judgements,
    evaluate_run,
    graded_metrics,
    hit_metrics,
    judgements,
    mteb_name,
    parse_measure,
    rank_run,
    tie_keys,
)

pytrec_eval = pytest.importorskip("pytrec_eval")

MEASURES = ["ndcg_cut.1", "ndcg_cut.3", "ndcg_cut.10", "map_cut.5", "map_cut.100", "recall.3", "recall.100"]
MEASURES += ["P.1", "P.5", "P.20", "recip_rank", "success.1", "success.5", "Rprec"]


def _random_case(rng: np.random.Generator, n_q: int, n_docs: int, depth: int, levels: int):
    """Graded qrels (with judged non-relevant and negative grades) and a run whose scores tie often."""
    docs = [f"d{rng.integers(10**6)}-{i}" for i in range(n_docs)]
    qrels, run = {}, {}
    for q in range(n_q):
        qid = f"q{q}"
        judged = rng.choice(n_docs, size=int(rng.integers(1, 12)), replace=False)
        qrels[qid] = {docs[j]: int(rng.integers(-1, levels + 1)) for j in judged}
        n_ret = int(rng.integers(0, depth + 1))
        ret = rng.choice(n_docs, size=n_ret, replace=False)
        # scores on a coarse grid: many exact ties, which trec_eval orders by document id
        run[qid] = {docs[j]: float(rng.integers(0, 6)) / 4 for j in ret}
    run["not-judged"] = {docs[0]: 1.0}
    return qrels, run


@pytest.mark.parametrize("seed", range(6))
def test_equals_pytrec_eval_on_random_graded_runs_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    qrels, run = _random_case(rng, n_q=40, n_docs=60, depth=30, levels=3)
    oracle = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES)).evaluate(run)
    ours = evaluate_run(qrels, run, MEASURES)
    assert ours.keys() == oracle.keys()
    for q, values in oracle.items():
        assert ours[q].keys() == values.keys()
        for name, v in values.items():
            assert abs(ours[q][name] - v) <= 1e-12, (q, name)


def test_mrr_cut_is_recip_rank_of_the_truncated_run() -> None:
    rng = np.random.default_rng(11)
    qrels, run = _random_case(rng, n_q=30, n_docs=40, depth=25, levels=2)
    ours = evaluate_run(qrels, run, ["mrr_cut.5"])
    for q in ours:
        ranked = sorted(run[q].items(), key=lambda kv: (-kv[1], [-ord(c) for c in kv[0]]))
        top = dict(ranked[:5])
        oracle = pytrec_eval.RelevanceEvaluator({q: qrels[q]}, {"recip_rank"}).evaluate({q: top})
        assert abs(ours[q]["mrr_cut_5"] - oracle[q]["recip_rank"]) <= 1e-12


def test_ties_are_ordered_by_document_id_decreasing() -> None:
    # three equal scores: trec_eval ranks z, c, a
    qrels = {"q": {"a": 1, "c": 0, "z": 0}}
    run = {"q": {"a": 0.5, "c": 0.5, "z": 0.5}}
    assert evaluate_run(qrels, run, ["recip_rank"])["q"]["recip_rank"] == pytest.approx(1 / 3, abs=0)
    ids, _ = rank_run(np.array([[0, 1, 2]]), np.array([[0.5, 0.5, 0.5]]), tie_keys(["a", "c", "z"]))
    assert ids.tolist() == [[2, 1, 0]]


def test_closed_forms() -> None:
    # one relevant document of grade 2 at rank 3 among 3: DCG = 2/log2(4) = 1, IDCG = 2
    judged = judgements({"q": {"x": 2}}, ["q"], ["u", "v", "x"])
    out = graded_metrics(np.array([[0, 1, 2]]), judged, ["ndcg_cut.3", "map_cut.3", "P.3", "recall.2", "recip_rank"])
    assert out["ndcg_cut_3"][0] == 0.5
    assert out["map_cut_3"][0] == pytest.approx(1 / 3, rel=1e-15)
    assert out["P_3"][0] == pytest.approx(1 / 3, rel=1e-15)
    assert out["recall_2"][0] == 0.0
    assert out["recip_rank"][0] == pytest.approx(1 / 3, rel=1e-15)


def test_empty_slots_and_queries_without_relevant_documents() -> None:
    judged = judgements({"a": {"x": 1}, "b": {"y": 0}}, ["a", "b"], ["x", "y"])
    out = graded_metrics(np.array([[0, -1], [-1, -1]]), judged, ["P.2", "recall.2", "ndcg_cut.2", "recip_rank"])
    assert out["P_2"].tolist() == [0.5, 0.0]
    assert out["recall_2"].tolist() == [1.0, 0.0]
    assert out["ndcg_cut_2"].tolist() == [1.0, 0.0]
    assert out["recip_rank"].tolist() == [1.0, 0.0]


def test_queries_without_judgements_at_the_end_count_no_relevant_document() -> None:
    judged = Judgements(np.array([0, 1, 1, 1]), np.array([0]), np.array([1]), 2)
    assert judged.num_relevant().tolist() == [1, 0, 0]
    # a hit matrix whose last query is lone: its run judges nothing for that query
    out = hit_metrics(np.array([[True, False], [False, False]]), [1, 0], ["success.1", "recip_rank"])
    assert out["success_1"][0] == 1.0 and math.isnan(out["success_1"][1])
    assert out["recip_rank"][0] == 1.0 and math.isnan(out["recip_rank"][1])


def test_cutoff_beyond_the_run_keeps_every_result() -> None:
    qrels = {"q": {"a": 1, "b": 3}}
    run = {"q": {"a": 0.9, "c": 0.2}}
    ours = evaluate_run(qrels, run, ["ndcg_cut.1000", "map_cut.1000", "P.1000"])
    oracle = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1000", "map_cut.1000", "P.1000"}).evaluate(run)
    for name, v in oracle["q"].items():
        assert abs(ours["q"][name] - v) <= 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_map_at_r_equals_its_definition_by_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    qrels, run = _random_case(rng, n_q=30, n_docs=40, depth=25, levels=2)
    ours = evaluate_run(qrels, run, ["map_at_r"])
    for q, row in ours.items():
        relevant = {d for d, g in qrels[q].items() if g >= 1}
        ranked = sorted(sorted(run[q], reverse=True), key=lambda d: -run[q][d])  # trec_eval's order
        found, total = 0, 0.0
        for i, d in enumerate(ranked[: len(relevant)], 1):
            if d in relevant:
                found += 1
                total += found / i
        assert abs(row["map_at_r"] - (total / len(relevant) if relevant else 0.0)) <= 1e-12, q


def test_measure_names() -> None:
    assert parse_measure("ndcg_cut.10") == ("ndcg_cut", 10)
    assert parse_measure("recip_rank") == ("recip_rank", None)
    assert mteb_name("map_cut.100") == "map_at_100"
    assert mteb_name("P.5") == "precision_at_5"
    assert mteb_name("mrr_cut.10") == "mrr_at_10"
    assert parse_measure("map_at_r") == ("map_at_r", None) and parse_measure("success.5") == ("success", 5)
    with pytest.raises(ValueError, match="MTEB"):
        mteb_name("map_at_r")
    for bad in ("ndcg@10", "ndcg_cut.0", "map", "P.x"):
        with pytest.raises(ValueError, match="measures"):
            parse_measure(bad)


def test_bad_input_names_the_argument() -> None:
    judged = judgements({"q": {"x": 1}}, ["q"], ["x"])
    with pytest.raises(ValueError, match="ids"):
        graded_metrics(np.zeros((2, 1), dtype=np.int64), judged, ["P.1"])
    with pytest.raises(ValueError, match="scores"):
        graded_metrics(np.zeros((1, 1), dtype=np.int64), judged, ["P.1"], scores=np.zeros((1, 1)))
    with pytest.raises(ValueError, match="ids"):
        rank_run(np.array([[5]]), np.array([[0.1]]), tie_keys(["x"]))
    with pytest.raises(ValueError, match="scores"):
        rank_run(np.array([[0]]), np.array([[math.nan]]), tie_keys(["x"]))
    with pytest.raises(ValueError, match="qrels"):
        judgements({"q": {"nope": 1}}, ["q"], ["x"])
    with pytest.raises(ValueError, match="qrels"):
        judgements({"q": {"x": 1.5}}, ["q"], ["x"])
